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
mod extensions;
mod future;
mod meter;
mod rate_limit_layer;
mod read;
mod service;
mod shared;
mod state;

pub use ask::{Allow, Asker};
pub use attempt::{Attempt, Departed, OnDeparted};
pub use body::{BoxError, RequestBody, ResponseBody};
pub use builder::{Builder, RouteBuilder};
pub use extensions::{
    answered, AnswerBy, BodyCutShort, ClientAddr, Decided, MatchedRoute, OutcomeUnseen,
};
pub(crate) use extensions::{request_id, Arrival};
pub use future::ResponseFuture;
pub use meter::MeteredBody;
pub use rate_limit_layer::{LayerError, RateLimitLayer};
pub use read::announced_length;
pub use service::RateLimit;
pub use shared::{ForwardingWarning, Shared, Unmatched};
