//! slidegate's limits inside your own service: a small axum app behind
//! `slidegate::RateLimitLayer`, built from a config file whose routes have no `upstream`.
//!
//! ```text
//! cargo run --example embed -- --config examples/embed.toml --listen 127.0.0.1:3000
//! curl -si -X POST 127.0.0.1:3000/login -d '{"username":"ann","password":"wrong"}' \
//!      -H 'content-type: application/json'
//! ```
//!
//! The app answers `POST /login` (401 unless the password is `right`), `POST /otp/send` and
//! `GET /hello`; `GET /metrics` serves the layer's metrics. Requests no route of the file takes
//! pass through unlimited.

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use slidegate::RateLimitLayer;
use tower::Layer;

/// An axum app behind slidegate's rate-limit layer.
#[derive(Parser)]
struct Args {
    /// The layer's config file (`[store]`, `[keys]`, `[[routes]]` without `upstream`).
    #[arg(long)]
    config: PathBuf,
    /// Where the app listens.
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The layer logs through `tracing` (a warning about forwarding headers no trusted proxy
    // vouches for, a store that cannot be reached): an app shows them with its subscriber.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let layer = RateLimitLayer::from_file(&args.config).await?;
    let scraped = layer.clone();
    let routes = Router::new()
        .route("/hello", get(|| async { "hello\n" }))
        .route("/login", post(login))
        .route("/otp/send", post(|| async { "sent\n" }));
    // The layer wraps the whole router, so it sees every request before axum routes it: the
    // router then routes the path as the layer normalised it (`/a/../hello` is `/hello`).
    // (`Router::layer` would run it after routing, inside the route axum chose.)
    let app = Router::new()
        // Outside the layer: scraping is never limited.
        .route("/metrics", get(move || async move { scraped.scrape() }))
        .fallback_service(layer.layer(routes));
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    eprintln!("embed: listening on {}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

/// 200 for the password `right`, 401 for anything else.
async fn login(Json(body): Json<serde_json::Value>) -> (StatusCode, &'static str) {
    match body.get("password").and_then(|p| p.as_str()) {
        Some("right") => (StatusCode::OK, "welcome\n"),
        _ => (StatusCode::UNAUTHORIZED, "wrong password\n"),
    }
}
