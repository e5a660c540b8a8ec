//! What travels with a request or its response as extensions: how the request arrived (its id
//! and the client's address), the route it matched, what the layer decided (for an access log),
//! and the marks an inner service or a proxy in front sets.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::request::Parts;

use crate::access_log;
use crate::error::{ClientClosed, CLIENT_CLOSED_REQUEST};
use crate::metrics::DecisionLabel;
use crate::peer::Peer;
use crate::request_id::RequestId;
use crate::route::Route;

/// How a request reached the gateway's proxy listener: the id it is answered with and its TCP
/// peer. The gateway hands both over as this one request extension, read by the layer and by
/// the proxy: each extension costs an allocation and an insert into a map that grows past its
/// first three entries, on every request.
#[derive(Clone)]
pub struct Arrival {
    /// The request's id.
    pub request_id: RequestId,
    /// Who sent it.
    pub peer: Arc<Peer>,
}

/// The client's address, as the server that accepted the connection saw it. The gateway's
/// other listeners (forward auth, ext_authz) and an embedding server set it; when it is absent,
/// axum's `ConnectInfo<SocketAddr>` or tonic's `TcpConnectInfo` is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// When the caller stops waiting for the layer's answer (request extension): ext_authz sets it
/// from the gRPC call's deadline. A delay route waits at most until then; a refusal whose wait
/// ends later is answered at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerBy(pub std::time::Instant);

/// Marks an inner service's response whose status says nothing of the request's outcome
/// (forward auth answers before the request is served; the proxy's 400 for a client body that
/// broke off after the head went upstream): an outcome-counted attempt stays counted instead of
/// being settled by it (response extension).
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

impl Decided {
    /// What the access log shows of it.
    pub fn for_log(&self) -> access_log::Decision<'_> {
        access_log::Decision {
            route: self.route.as_deref(),
            log: self.log,
            label: self.label,
            limit: self.limit.as_deref(),
            key: self.key.as_deref(),
        }
    }
}

/// How a response answers its request, as the access log shows it: its status and what the
/// layer decided (from its extensions); the upstream's answer is the proxy's to add.
pub fn answered<B>(response: &http::Response<B>) -> access_log::Answered<'_> {
    let left = response.extensions().get::<ClientClosed>().is_some();
    access_log::Answered {
        status: match left {
            true => CLIENT_CLOSED_REQUEST,
            false => response.status().as_u16(),
        },
        decided: response.extensions().get::<Decided>().map(Decided::for_log),
        upstream: None,
    }
}

/// The request's id from its extensions: its [`Arrival`]'s, else a [`RequestId`] (another
/// listener's), else a new one.
pub fn request_id(extensions: &http::Extensions) -> RequestId {
    given_id(extensions).unwrap_or_else(RequestId::generate)
}

/// The id a listener gave the request: its [`Arrival`]'s, else a [`RequestId`] extension.
fn given_id(extensions: &http::Extensions) -> Option<RequestId> {
    if let Some(arrival) = extensions.get::<Arrival>() {
        return Some(arrival.request_id.clone());
    }
    extensions.get::<RequestId>().cloned()
}

/// The id of a request the layer takes: the one a listener gave it, else (an embedded layer)
/// the `X-Request-Id` of a peer `server.trusted_proxies` lists, as the gateway keeps a trusted
/// proxy's, else a new one.
pub(super) fn arriving_id(head: &Parts, peer: IpAddr, trusted: &[ipnet::IpNet]) -> RequestId {
    given_id(&head.extensions).unwrap_or_else(|| {
        RequestId::for_request(&head.headers, crate::key::is_trusted(peer, trusted))
    })
}

/// The client's address from the request's extensions: the gateway's [`Arrival`], else a
/// [`ClientAddr`] (another listener's, or an embedding server's), else axum's `ConnectInfo`,
/// else the `TcpConnectInfo` a tonic server gives every request; `None` without any.
pub(super) fn client_addr(extensions: &http::Extensions) -> Option<IpAddr> {
    if let Some(arrival) = extensions.get::<Arrival>() {
        return Some(arrival.peer.ip);
    }
    if let Some(ClientAddr(ip)) = extensions.get::<ClientAddr>() {
        return Some(*ip);
    }
    if let Some(axum::extract::ConnectInfo(addr)) =
        extensions.get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(addr.ip());
    }
    if let Some(addr) = extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(|info| info.remote_addr())
    {
        return Some(addr.ip());
    }
    None
}
