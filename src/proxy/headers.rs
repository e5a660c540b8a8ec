//! Header rewriting between client and upstream: hop-by-hop headers (RFC 9110 section 7.6.1,
//! plus any named in `Connection`) are removed both ways, and the forwarding headers the
//! upstream gets tell the truth: `X-Forwarded-For` is the trusted chain as received (every
//! line, in order, of the header trusted proxies write: `server.client_ip_header`) plus the
//! peer, or just the peer; `X-Real-IP` is the client IP the limits
//! counted; `X-Forwarded-Proto` and `X-Forwarded-Host` are set by the gateway (the scheme and
//! host of the request it received), whoever the peer is.
//!
//! Differences from a naive append: a client's own forwarding chain is kept only when the TCP
//! peer is a trusted proxy, and only in the header that proxy writes (behind proxies that write
//! `Forwarded`, an `X-Forwarded-For` is the client's own, passed along untouched: the chain sent
//! on is `Forwarded`'s `for=` addresses); from anyone else `X-Forwarded-For` is replaced and `Forwarded`,
//! `X-Real-IP` and the other origin headers dropped, so an upstream that trusts this gateway is
//! never handed a chain the client made up. And differences from a literal reading of RFC 9110: a `Connection` header
//! cannot remove the headers the gateway sets (`X-Forwarded-*`, `X-Real-IP`, `X-Request-Id`),
//! or a client behind a trusted proxy could strip that proxy's chain and be seen upstream as
//! the proxy itself.

use std::net::IpAddr;

use http::header::{
    HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, FORWARDED, PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};

use crate::key::{chain_as_listed, X_FORWARDED_FOR, X_REAL_IP};
use crate::peer::Peer;

/// `X-Forwarded-Proto`
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`
pub static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Whether the gateway itself sets `name` on a forwarded request.
fn set_by_the_gateway(name: &HeaderName) -> bool {
    name == X_FORWARDED_FOR
        || name == X_REAL_IP
        || name == X_FORWARDED_PROTO
        || name == X_FORWARDED_HOST
        || name == crate::request_id::X_REQUEST_ID
}

/// The other headers frameworks read for the scheme, port, host or path a client used
/// (Symfony's and Spring's trusted headers, Rack's `scheme`, ASP.NET's path base): only a
/// trusted proxy may say them; the gateway sets none of them itself.
static CLAIMED_ORIGIN: [&str; 6] = [
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-forwarded-ssl",
    "x-forwarded-scheme",
    "x-forwarded-server",
    "front-end-https",
];

/// Removes the [`CLAIMED_ORIGIN`] headers an untrusted client sent (one look at the names
/// tells when there are none, as for most requests).
fn remove_claimed_origin(headers: &mut HeaderMap) {
    let claimed = |name: &HeaderName| {
        let name = name.as_str();
        (name.starts_with("x-forwarded-") || name.starts_with("front-end-"))
            && CLAIMED_ORIGIN.contains(&name)
    };
    if headers.keys().any(claimed) {
        for name in CLAIMED_ORIGIN {
            headers.remove(name);
        }
    }
}

/// The hop-by-hop headers every message loses: RFC 9110's (`Connection` first), and the older
/// `Keep-Alive` and `Proxy-Connection`.
static HOP_BY_HOP: [&HeaderName; 9] = [
    &CONNECTION,
    &TE,
    &TRAILER,
    &TRANSFER_ENCODING,
    &UPGRADE,
    &PROXY_AUTHORIZATION,
    &PROXY_AUTHENTICATE,
    &KEEP_ALIVE,
    &PROXY_CONNECTION,
];

/// Removes hop-by-hop headers, including those the `Connection` header names (except the ones
/// the gateway sets), and a `Content-Length` beside a `Transfer-Encoding`.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none, which one look at the names they hold tells; otherwise only
    // those there are removed (a chunked answer has `Transfer-Encoding` alone).
    if !headers.keys().any(|name| HOP_BY_HOP.contains(&name)) {
        return;
    }
    let framed_by_transfer_encoding = headers.contains_key(TRANSFER_ENCODING);
    let mut present = [false; HOP_BY_HOP.len()];
    for name in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|&hop| hop == name) {
            present[i] = true;
        }
    }
    if present[0] {
        let named: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .filter(|name| !set_by_the_gateway(name))
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for (name, _) in HOP_BY_HOP.iter().zip(present).filter(|(_, there)| *there) {
        headers.remove(*name);
    }
    // RFC 9112 6.3: a message with both is framed by its Transfer-Encoding (decoded by now);
    // its Content-Length is wrong and goes too, or it would frame the body sent on.
    if framed_by_transfer_encoding {
        headers.remove(CONTENT_LENGTH);
    }
}

/// Sets the forwarding headers for a request from `peer`, attributed to `client`.
pub fn set_forwarded(
    headers: &mut HeaderMap,
    peer: &Peer,
    client: IpAddr,
    original_host: Option<HeaderValue>,
) {
    let chain = match peer.vouched_in {
        Some(name) => chain_as_listed(headers, name),
        None => Vec::new(),
    };
    let xff = if chain.is_empty() {
        peer.ip_value.clone()
    } else {
        let mut joined = chain.join(&b", "[..]);
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(peer.ip_value.as_bytes());
        HeaderValue::from_bytes(&joined).unwrap_or_else(|_| peer.ip_value.clone())
    };
    headers.insert(X_FORWARDED_FOR.clone(), xff);
    if !peer.trusted() {
        headers.remove(FORWARDED);
        remove_claimed_origin(headers);
    }
    let real = if client == peer.ip {
        peer.ip_value.clone()
    } else {
        HeaderValue::from_str(&client.to_string()).expect("an address is a header value")
    };
    headers.insert(X_REAL_IP.clone(), real);
    // Set whoever the peer is: the scheme and host of the request this gateway received.
    headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static("http"));
    match original_host {
        Some(host) => {
            headers.insert(X_FORWARDED_HOST.clone(), host);
        }
        None => {
            headers.remove(&X_FORWARDED_HOST);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header map with each of `names` once.
    fn named(names: &[&'static str]) -> HeaderMap {
        names
            .iter()
            .map(|&name| (HeaderName::from_static(name), HeaderValue::from_static("1")))
            .collect()
    }

    #[test]
    fn hop_by_hop_and_connection_named_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(CONNECTION, HeaderValue::from_static("keep-alive, x-secret"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-kept"));
    }

    #[test]
    fn each_hop_by_hop_header_goes_even_alone() {
        for name in [
            "connection",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "proxy-authorization",
            "proxy-authenticate",
            "keep-alive",
            "proxy-connection",
        ] {
            let mut h = HeaderMap::new();
            h.insert("x-kept", HeaderValue::from_static("1"));
            h.append(name, HeaderValue::from_static("a"));
            h.append(name, HeaderValue::from_static("b"));
            remove_hop_by_hop(&mut h);
            assert_eq!(h.len(), 1, "{name} stayed");
            assert!(h.contains_key("x-kept"));
        }
    }

    #[test]
    fn a_message_without_hop_by_hop_headers_keeps_them_all() {
        let mut h = named(&[
            "host",
            "content-length",
            "x-connection",
            "keep-alive-x",
            "accept",
        ]);
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 5);
    }

    #[test]
    fn connection_cannot_name_the_headers_the_gateway_sets() {
        let mut h = named(&[
            "x-forwarded-for",
            "x-forwarded-proto",
            "x-forwarded-host",
            "x-request-id",
            "x-real-ip",
        ]);
        h.insert(
            CONNECTION,
            HeaderValue::from_static(
                "X-Forwarded-For, x-forwarded-proto, X-Forwarded-Host, X-Request-Id, X-Real-IP",
            ),
        );
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 5);
        assert!(!h.contains_key(CONNECTION));
    }

    #[test]
    fn the_chain_comes_from_the_header_trusted_proxies_write() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("6.6.6.6"));
        h.append("forwarded", HeaderValue::from_static("for=1.1.1.1"));
        h.append(
            "forwarded",
            HeaderValue::from_static("for=\"[2001:db8::1]:4711\";proto=https, for=unknown"),
        );
        let peer = Peer {
            vouched_in: Some(crate::key::chain_header(
                crate::config::ClientIpHeader::Forwarded,
            )),
            ..Peer::new("10.0.0.1".parse().unwrap())
        };
        set_forwarded(&mut h, &peer, "1.1.1.1".parse().unwrap(), None);
        let xff = &h["x-forwarded-for"];
        assert_eq!(xff, "1.1.1.1, 2001:db8::1, unknown, 10.0.0.1");
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("6.6.6.6"));
        h.insert("x-real-ip", HeaderValue::from_static("9.9.9.9"));
        let peer = Peer {
            vouched_in: Some(&X_REAL_IP),
            ..peer
        };
        set_forwarded(&mut h, &peer, "9.9.9.9".parse().unwrap(), None);
        assert_eq!(h["x-forwarded-for"], "9.9.9.9, 10.0.0.1");
    }

    #[test]
    fn forwarded_chain_is_kept_only_from_trusted_peers() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("6.6.6.6"));
        h.insert("forwarded", HeaderValue::from_static("for=6.6.6.6"));
        h.insert("x-real-ip", HeaderValue::from_static("6.6.6.6"));
        let untrusted = Peer::new("203.0.113.7".parse().unwrap());
        set_forwarded(
            &mut h,
            &untrusted,
            untrusted.ip,
            Some(HeaderValue::from_static("api.example")),
        );
        assert_eq!(h["x-forwarded-for"], "203.0.113.7");
        assert_eq!(h["x-real-ip"], "203.0.113.7");
        assert!(h.get("forwarded").is_none());
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "api.example");
        let mut h = HeaderMap::new();
        h.append("x-forwarded-for", HeaderValue::from_static("198.51.100.1"));
        h.append("x-forwarded-for", HeaderValue::from_static("10.0.0.9"));
        let trusted = Peer {
            vouched_in: Some(&X_FORWARDED_FOR),
            ..Peer::new("10.0.0.1".parse().unwrap())
        };
        set_forwarded(&mut h, &trusted, "198.51.100.1".parse().unwrap(), None);
        assert_eq!(h["x-forwarded-for"], "198.51.100.1, 10.0.0.9, 10.0.0.1");
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-real-ip"], "198.51.100.1");

        // A trusted proxy's own scheme and host are replaced too: the gateway says what it received.
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        h.insert("x-forwarded-host", HeaderValue::from_static("evil.example"));
        set_forwarded(
            &mut h,
            &trusted,
            trusted.ip,
            Some(HeaderValue::from_static("api.example")),
        );
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "api.example");
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-host", HeaderValue::from_static("evil.example"));
        set_forwarded(&mut h, &trusted, trusted.ip, None);
        assert!(h.get("x-forwarded-host").is_none());
    }
}
