//! Test support: real `redis-server` processes on free loopback ports, a real HTTP upstream,
//! real gateways started in process on port 0, and a small HTTP client. The modules named after
//! a behaviour (`admin`, `recipes`, `rate_limits`, ...) hold what the test files of that
//! behaviour share.

#![allow(dead_code)]

pub mod admin;
pub mod auth;
pub mod cli_commands;
pub mod cluster;
pub mod coalescing;
pub mod config;
pub mod envoy_routes;
pub mod ext_authz;
pub mod gateway;
pub mod grpc;
pub mod hardening;
pub mod http;
pub mod layer;
pub mod leaving;
pub mod llm;
pub mod load;
pub mod metrics;
pub mod observe;
pub mod one_core;
pub mod otp_login;
pub mod problem;
pub mod process;
pub mod proxies;
pub mod rate_limits;
pub mod raw;
pub mod recipes;
pub mod redis;
pub mod reference;
pub mod resp;
pub mod rls;
pub mod sentinel;
pub mod store;
pub mod upstream;

/// A loopback port nobody listens on right now. It is released before the caller uses it, so
/// another process may take it in between: [`redis::RedisServer::start`] retries on a fresh port
/// when that happens, and a test that must hold a port until it listens there uses
/// [`reserved_port`].
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A loopback port held by a socket that is bound but not listening: no one else can take it,
/// and a connect to it is refused as if nothing were there. `listen` on the socket later serves
/// on that very port, with no moment in which it is free.
pub fn reserved_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind("127.0.0.1:0".parse().unwrap())
        .expect("a loopback port");
    let port = socket.local_addr().expect("its address").port();
    (socket, port)
}

/// A key prefix unique to one test, so tests sharing a Redis never see each other's keys.
pub fn unique_prefix(test: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "t{}-{}-{}",
        std::process::id(),
        test,
        N.fetch_add(1, Ordering::Relaxed)
    )
}
