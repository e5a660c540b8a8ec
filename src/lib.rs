#![warn(missing_docs)]
//! slidegate: an HTTP reverse proxy that enforces exact sliding-window rate limits shared by
//! every gateway instance, because each decision runs atomically as a Lua script in Redis; and
//! the same limiter as a `tower` layer for your own service ([`RateLimitLayer`]).
//!
//! The request path, outermost first; data flows one way:
//!
//! ```text
//! accept (server: connection bounds, head and idle timeouts)
//!   -> request id, access log (gateway)
//!   -> RateLimitLayer (layer):
//!        route (route: normalise the path, match ignoring case)
//!        -> key (key: client IP behind trusted proxies, header, query, verified JWT claim,
//!                JSON body member, form field; normalised, cut, hashed, escaped)
//!        -> limiter (limit: deny cache -> store: one Redis script, coalesced per node | memory;
//!                    on_error; reject | delay | block | shadow; outcome reservations; metrics)
//!   -> proxy (proxy: upstream, streamed both ways) -> response + rate-limit headers
//! ```
//!
//! The admin listener (`admin`) serves metrics, health, usage, blocks, reload and the batch
//! decision API, which calls the same limiter as the proxy path.
//!
//! # Layering
//!
//! Modules import only modules on lower lines (no line imports its own line or a line above
//! it), and inside each folder a file imports only files below it: a folder's `mod.rs` (or
//! `x.rs` beside `x/`) sits on top and re-exports, and what its children share lives in leaf
//! files of their own. `tests/layering.rs` fails on any loop between files or folder entries,
//! and on any file over 400 lines.
//!
//! ```text
//! app, campaign             wiring of the binary; the load campaign
//! admin, watch              admin listener; config files watched, reload
//! gateway, grpc, state      the proxy listener's service; the gRPC listeners; swapped state
//! reload                    what a reload may not do
//! server, proxy,            connections and their bounds; the upstream proxy; the forward-auth
//!   forward_auth, ext_authz   and ext_authz listeners
//! layer                     RateLimitLayer: route -> key -> limiter, one future per request
//! error                     failures become responses (problem bodies, gRPC statuses)
//! route, rls                the route table; Envoy's rate-limit service
//! limit, access_log         the limiter (policies, deny cache, headers); the access log line
//! key, metrics, logging     keys derived from requests; metric handles; log set-up
//! store                     Redis (scripts, lanes, cluster) | memory
//! config                    the validated config (raw mirror, validate/, limit files)
//! algorithm, cost, tier,    leaves: the counting algorithms, answer costs, segments and
//!   path, host, request_id,   plans, path normalisation, Host checks, request ids,
//!   connection, peer,         Connection headers, the TCP peer of a request, per-worker
//!   workers, allocator,       values, the process's allocator, one gRPC method served with
//!   grpc_unary, header_case   its request read leniently, header names as written in text
//! ```
//!
//! # Embedding
//!
//! The limiter in front of an axum app, built in code (or from a config file with
//! [`RateLimitLayer::from_file`]); requests no route takes pass through unlimited:
//!
//! ```no_run
//! use axum::{routing::post, Router};
//! use slidegate::layer::RouteBuilder;
//! use slidegate::RateLimitLayer;
//! use tower::Layer;
//!
//! # async fn app() -> Result<(), Box<dyn std::error::Error>> {
//! let limits = RateLimitLayer::builder()
//!     .memory()
//!     .route(
//!         RouteBuilder::new("login", "/login")
//!             .methods(&["POST"])
//!             .key(&["json:username"])
//!             .limit("per-minute", 5, "1m"),
//!     )
//!     .build()
//!     .await?;
//! let routes = Router::new().route("/login", post(|| async { "welcome" }));
//! // Around the whole router, so that it routes the path the layer normalised and counted.
//! let app = Router::new().fallback_service(limits.layer(routes));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(
//!     listener,
//!     app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
//! )
//! .await?;
//! # Ok(())
//! # }
//! ```
//!
//! Behind a load balancer every connection comes from the balancer: name it, and the header it
//! writes, or every client counts as one `ip` key. A layer file takes these from `[server]`
//! (`trusted_proxies`, `client_ip_header`, `ipv6_prefix`, nothing else of that section); the
//! builder takes them as `.server("trusted_proxies", vec!["10.0.0.0/8"])`. A layer that sees
//! forwarding headers from a private or loopback peer it does not trust logs one warning naming
//! `server.trusted_proxies`.
//!
//! ```toml
//! [server]
//! trusted_proxies = ["10.0.0.0/8"]        # the load balancer's network
//! client_ip_header = "x-forwarded-for"    # the one header it writes
//!
//! [store]
//! backend = "memory"
//!
//! [[routes]]
//! name = "otp"
//! path = "/otp/send"
//! methods = ["POST"]
//!   [[routes.limits]]
//!   name = "per-ip"
//!   limit = 20
//!   window = "1h"
//! ```

pub mod access_log;
pub mod admin;
pub mod algorithm;
pub mod allocator;
pub mod app;
pub mod campaign;
pub mod config;
pub mod connection;
pub mod cost;
pub mod error;
pub mod ext_authz;
pub mod forward_auth;
pub mod gateway;
pub mod grpc;
pub mod grpc_unary;
pub mod header_case;
pub mod host;
pub mod key;
pub mod layer;
pub mod limit;
pub mod logging;
pub mod metrics;
pub mod path;
pub mod peer;
pub mod proxy;
pub mod reload;
pub mod request_id;
pub mod rls;
pub mod route;
pub mod server;
pub mod state;
pub mod store;
pub mod tier;
pub mod watch;
pub mod workers;

pub use layer::RateLimitLayer;
