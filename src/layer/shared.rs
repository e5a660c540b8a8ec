//! What every clone of the layer and its services shares: the route table in force, the
//! limiter, what an unrouted request gets, and the once-per-layer forwarding warning.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::limit::Limiter;
use crate::route::RouteTable;

/// What a request that no route takes gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmatched {
    /// A 404 problem body (the gateway's proxy listener: every path it serves is a route with
    /// an upstream; a route without one serves forward auth only, and is passed over here).
    NotFound,
    /// Passed to the inner service unlimited (an embedded layer: the app has other paths).
    PassThrough,
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
    /// The service the layer wraps is the app itself (an embedded layer): its answers count
    /// as the upstream's in `slidegate_upstream_*`. The gateway's proxy counts its own, and
    /// forward auth and ext_authz have no upstream.
    pub inner_is_upstream: bool,
}

/// The once-per-layer warnings about where clients come from: requests from a private or
/// loopback peer carry forwarding headers while `server.trusted_proxies` does not cover that
/// peer (the sign of a layer behind a load balancer that counts every client as the
/// balancer); requests come with no client address at all (a server that gives none, so every
/// client is one `ip` key). Once logged, a request costs one relaxed atomic load.
#[derive(Debug, Default)]
pub struct ForwardingWarning {
    forwarding: AtomicBool,
    addressless: AtomicBool,
}

impl ForwardingWarning {
    /// The address a request with none counts as, `0.0.0.0`, saying once what that means.
    pub fn no_address(&self) -> IpAddr {
        if !self.addressless.load(Ordering::Relaxed)
            && !self.addressless.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                "a request reached the rate-limit layer with no client address (no ConnectInfo, TcpConnectInfo or ClientAddr extension): every client counts as 0.0.0.0 for `ip` keys, `exempt` and `on_missing_key = \"ip\"`; serve axum with into_make_service_with_connect_info::<SocketAddr>(), or set a ClientAddr extension. Logged once."
            );
        }
        IpAddr::from([0, 0, 0, 0])
    }

    /// Logs the warning if this request shows the sign and it was not logged yet.
    pub fn check(&self, peer: IpAddr, headers: &http::HeaderMap, trusted: &[ipnet::IpNet]) {
        if self.forwarding.load(Ordering::Relaxed) {
            return;
        }
        let Some(header) = crate::key::unvouched_forwarding(peer, headers, trusted) else {
            return;
        };
        if self.forwarding.swap(true, Ordering::Relaxed) {
            return;
        }
        tracing::warn!(
            peer = %peer,
            header = %header,
            "requests from {peer} carry {header}, but server.trusted_proxies does not list {peer}: every client behind it counts as {peer} for `ip` keys; list the load balancer's addresses in server.trusted_proxies (and the header it writes in server.client_ip_header). Logged once."
        );
    }
}
