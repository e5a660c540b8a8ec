//! The TCP peer of a request as the gateway's server accepted it: its address (what the
//! rate-limit layer takes for the client's when no trusted proxy names another), the address
//! rendered once per connection for `X-Forwarded-For`, and, when it is a trusted proxy, the
//! forwarding header its chain is read from. The
//! gateway hands it over with the request's id, as one request extension (the layer's
//! `Arrival`), read by the layer and by the proxy.

use std::net::IpAddr;

use http::{HeaderName, HeaderValue};

/// Who sent a request: the TCP peer, its address as a header value (rendered once per
/// connection), and whether it is a trusted proxy.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The peer's address.
    pub ip: IpAddr,
    /// The address as `X-Forwarded-For` writes it.
    pub ip_value: HeaderValue,
    /// When it is in `server.trusted_proxies`, the header those proxies write the chain of
    /// addresses in (`server.client_ip_header`); `None` when it is not trusted.
    pub vouched_in: Option<&'static HeaderName>,
}

impl Peer {
    /// An untrusted peer, its address rendered once; whether it is trusted is decided per
    /// request (a reload may change the list).
    pub fn new(ip: IpAddr) -> Peer {
        let ip = ip.to_canonical();
        Peer {
            ip,
            ip_value: HeaderValue::from_str(&ip.to_string()).expect("an address is a header value"),
            vouched_in: None,
        }
    }

    /// Whether it is a trusted proxy.
    pub fn trusted(&self) -> bool {
        self.vouched_in.is_some()
    }
}
