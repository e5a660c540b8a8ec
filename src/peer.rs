//! The TCP peer of a request as the gateway's server accepted it: its address (what the
//! rate-limit layer takes for the client's when no trusted proxy names another), the address
//! rendered once per connection for `X-Forwarded-For`, and whether it is a trusted proxy. The
//! gateway hands it over with the request's id, as one request extension (the layer's
//! `Arrival`), read by the layer and by the proxy.

use std::net::IpAddr;

use http::HeaderValue;

/// Who sent a request: the TCP peer, its address as a header value (rendered once per
/// connection), and whether it is a trusted proxy.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The peer's address.
    pub ip: IpAddr,
    /// The address as `X-Forwarded-For` writes it.
    pub ip_value: HeaderValue,
    /// Whether it is in `server.trusted_proxies`.
    pub trusted: bool,
}

impl Peer {
    /// Renders `ip` once; `trusted` is decided per request (a reload may change the list).
    pub fn new(ip: IpAddr) -> Peer {
        let ip = ip.to_canonical();
        Peer {
            ip,
            ip_value: HeaderValue::from_str(&ip.to_string()).expect("an address is a header value"),
            trusted: false,
        }
    }
}
