//! `[forward_auth]`, validated: where the subrequests of a proxy that asks before it forwards
//! (NGINX `auth_request`, Caddy `forward_auth`, Traefik `ForwardAuth`) are answered, and the
//! status a refusal gets.

use std::net::SocketAddr;

/// `[forward_auth]`
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardAuthConfig {
    /// Where the subrequests of a proxy in front are answered.
    pub listen: SocketAddr,
    /// The status of a refusal: 429, or 403 for NGINX's `auth_request` (which passes on only
    /// 2xx, 401 and 403).
    pub refused_status: u16,
}
