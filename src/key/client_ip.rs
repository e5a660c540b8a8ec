//! The client IP: the TCP peer, unless the peer is a trusted proxy. Then the one forwarding
//! header those proxies write (`server.client_ip_header`) is read from the right, every line in
//! order, skipping trusted hops, because only the hops our own proxies appended can be believed;
//! the left-most entry is whatever the client chose to send. The other forwarding headers are
//! not read: a client cannot pick its IP by sending its own `X-Forwarded-For` through a proxy
//! that writes `Forwarded`.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use http::header::{HeaderMap, HeaderName, FORWARDED};
use ipnet::IpNet;

use crate::config::ClientIpHeader;

/// `X-Forwarded-For`, which `http` has no constant for.
pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Real-IP`
pub static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
/// `Forwarded`, as a static a peer can point to.
static FORWARDED_NAME: HeaderName = FORWARDED;

/// The header named by `server.client_ip_header`.
pub fn chain_header(header: ClientIpHeader) -> &'static HeaderName {
    match header {
        ClientIpHeader::XForwardedFor => &X_FORWARDED_FOR,
        ClientIpHeader::Forwarded => &FORWARDED_NAME,
        ClientIpHeader::XRealIp => &X_REAL_IP,
    }
}

/// The chain a trusted proxy wrote in `name` (its `server.client_ip_header`), left to right,
/// as `X-Forwarded-For` lists it: that header's own lines as received, `X-Real-IP`'s likewise,
/// `Forwarded`'s `for=` values unquoted (an address without brackets or port, an obfuscated
/// name or `unknown` as written). Blank lines are skipped.
pub fn chain_as_listed<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Vec<Cow<'h, [u8]>> {
    let lines = headers.get_all(name).iter().map(|v| v.as_bytes());
    let lines = lines.filter(|v| !v.iter().all(u8::is_ascii_whitespace));
    if name != FORWARDED {
        return lines.map(Cow::Borrowed).collect();
    }
    let hops = lines.flat_map(|l| forwarded_for_values(&String::from_utf8_lossy(l)));
    hops.map(|hop| match parse_hop(&hop) {
        Some(ip) => Cow::Owned(ip.to_string().into_bytes()),
        None => Cow::Owned(hop.trim_matches('"').as_bytes().to_vec()),
    })
    .collect()
}

/// The address the request is attributed to.
pub fn client_ip(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &[IpNet],
    header: ClientIpHeader,
) -> IpAddr {
    let peer = peer.to_canonical();
    if !is_trusted(peer, trusted) {
        return peer;
    }
    let lines = |name: &HeaderName| {
        headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect::<Vec<_>>()
    };
    // every line's comma-separated addresses, in order
    let listed = |name: &HeaderName| -> Vec<String> {
        lines(name)
            .iter()
            .flat_map(|l| {
                l.split(',')
                    .map(|s| s.trim().to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let hops: Vec<String> = match header {
        ClientIpHeader::XForwardedFor => listed(&X_FORWARDED_FOR),
        ClientIpHeader::XRealIp => listed(&X_REAL_IP),
        ClientIpHeader::Forwarded => lines(&FORWARDED)
            .iter()
            .flat_map(|l| forwarded_for_values(l))
            .collect(),
    };
    if hops.is_empty() {
        return peer;
    }
    rightmost_untrusted(peer, hops, trusted)
}

/// Whether `ip` is inside one of the trusted networks.
pub fn is_trusted(ip: IpAddr, trusted: &[IpNet]) -> bool {
    let ip = ip.to_canonical();
    trusted.iter().any(|net| net.contains(&ip))
}

/// The forwarding header (`X-Forwarded-For`, `Forwarded`, `X-Real-IP`) a request carries from a
/// private or loopback peer that no trusted proxy range covers: most likely a load balancer or
/// reverse proxy missing from `server.trusted_proxies`, whose clients then all count as it.
/// (From a public peer such a header is a client's own, and ignored as it should be.)
pub fn unvouched_forwarding(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &[IpNet],
) -> Option<&'static HeaderName> {
    let peer = peer.to_canonical();
    let nearby = match peer {
        IpAddr::V4(v4) => v4.is_private() || v4.is_loopback() || v4.is_link_local(),
        // fc00::/7 (unique local) and fe80::/10 (link-local), written out for the MSRV
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || (v6.segments()[0] & 0xfe00) == 0xfc00
                || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    };
    if !nearby || is_trusted(peer, trusted) {
        return None;
    }
    let forwarding = [&X_FORWARDED_FOR, &FORWARDED, &X_REAL_IP];
    // one look at each name the request holds first: most requests carry none of these
    if !headers.keys().any(|name| forwarding.contains(&name)) {
        return None;
    }
    forwarding
        .into_iter()
        .find(|name| headers.contains_key(*name))
}

/// Walks the hops right to left; the first one not trusted is the client. A hop that does not
/// parse ends the walk at the last trusted hop seen: nothing left of it can be believed.
fn rightmost_untrusted(peer: IpAddr, hops: Vec<String>, trusted: &[IpNet]) -> IpAddr {
    let mut last_trusted = peer;
    for hop in hops.iter().rev() {
        let Some(ip) = parse_hop(hop) else {
            return last_trusted;
        };
        if !is_trusted(ip, trusted) {
            return ip;
        }
        last_trusted = ip;
    }
    last_trusted
}

/// Parses `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]:80`, with optional quotes.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim().trim_matches('"');
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(sa) = hop.parse::<SocketAddr>() {
        return Some(sa.ip().to_canonical());
    }
    let inner = hop.strip_prefix('[')?.split(']').next()?;
    inner.parse::<IpAddr>().ok().map(|ip| ip.to_canonical())
}

/// The `for=` values of a `Forwarded` header (RFC 7239), left to right.
fn forwarded_for_values(value: &str) -> Vec<String> {
    value
        .split(',')
        .filter_map(|element| {
            element.split(';').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                k.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| v.trim().to_string())
            })
        })
        .collect()
}

/// The `ip` key part: an IPv4 address as it is; an IPv6 address as its network of `prefix` bits
/// (`2001:db8:1:2::/64`), so one host cannot rotate addresses inside its allocation. A /128
/// prefix keys each address on its own, and prints it bare.
pub fn ip_key(ip: IpAddr, prefix: u8) -> String {
    match ip.to_canonical() {
        IpAddr::V6(v6) if prefix < 128 => {
            let net = ipnet::Ipv6Net::new(v6, prefix).map(|n| n.trunc());
            net.map_or_else(|_| v6.to_string(), |n| n.to_string())
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    const XFF: ClientIpHeader = ClientIpHeader::XForwardedFor;

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_it_sends() {
        let h = headers("x-forwarded-for", "1.1.1.1");
        let ip = client_ip(
            "203.0.113.7".parse().unwrap(),
            &h,
            &nets(&["10.0.0.0/8"]),
            XFF,
        );
        assert_eq!(ip, "203.0.113.7".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn trusted_peer_yields_rightmost_untrusted_hop() {
        let h = headers("x-forwarded-for", "6.6.6.6, 198.51.100.1, 10.0.0.2");
        let ip = client_ip("10.0.0.1".parse().unwrap(), &h, &nets(&["10.0.0.0/8"]), XFF);
        assert_eq!(ip, "198.51.100.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn garbage_hop_stops_the_walk() {
        let h = headers("x-forwarded-for", "6.6.6.6, nonsense, 10.0.0.2");
        let ip = client_ip("10.0.0.1".parse().unwrap(), &h, &nets(&["10.0.0.0/8"]), XFF);
        assert_eq!(ip, "10.0.0.2".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn only_the_configured_header_is_read() {
        let mut h = headers(
            "forwarded",
            "for=192.0.2.60;proto=http, for=\"[2001:db8::1]:4711\"",
        );
        h.insert("x-forwarded-for", HeaderValue::from_static("6.6.6.6"));
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let trusted = nets(&["10.0.0.0/8"]);
        let ip = client_ip(peer, &h, &trusted, ClientIpHeader::Forwarded);
        assert_eq!(ip, "2001:db8::1".parse::<IpAddr>().unwrap());
        assert_eq!(
            client_ip(peer, &h, &trusted, XFF),
            "6.6.6.6".parse::<IpAddr>().unwrap()
        );
        let real = headers("x-real-ip", "198.51.100.9");
        let ip = client_ip(peer, &real, &trusted, ClientIpHeader::XRealIp);
        assert_eq!(ip, "198.51.100.9".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn every_line_of_the_header_counts_in_order() {
        let mut h = HeaderMap::new();
        h.append("x-forwarded-for", HeaderValue::from_static("6.6.6.6"));
        h.append(
            "x-forwarded-for",
            HeaderValue::from_static("198.51.100.1, 10.0.0.2"),
        );
        let ip = client_ip("10.0.0.1".parse().unwrap(), &h, &nets(&["10.0.0.0/8"]), XFF);
        assert_eq!(ip, "198.51.100.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn forwarding_headers_from_a_nearby_untrusted_peer_are_noticed() {
        let h = headers("forwarded", "for=198.51.100.1");
        let none = nets(&[]);
        for peer in [
            "10.1.2.3",
            "127.0.0.1",
            "192.168.0.9",
            "::1",
            "fd00::7",
            "::ffff:10.0.0.1",
        ] {
            let peer: IpAddr = peer.parse().unwrap();
            assert_eq!(
                unvouched_forwarding(peer, &h, &none),
                Some(&FORWARDED),
                "{peer}"
            );
        }
        let public: IpAddr = "203.0.113.7".parse().unwrap();
        assert_eq!(unvouched_forwarding(public, &h, &none), None);
        let lb: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(unvouched_forwarding(lb, &h, &nets(&["10.0.0.0/8"])), None);
        assert_eq!(unvouched_forwarding(lb, &HeaderMap::new(), &none), None);
        for (name, expected) in [
            ("x-forwarded-for", &X_FORWARDED_FOR),
            ("x-real-ip", &X_REAL_IP),
        ] {
            let mut h = headers("accept", "*/*");
            h.insert(name, HeaderValue::from_static("198.51.100.1"));
            assert_eq!(
                unvouched_forwarding(lb, &h, &none),
                Some(expected),
                "{name}"
            );
        }
        // several: named in the order X-Forwarded-For, Forwarded, X-Real-IP
        let mut h = headers("x-real-ip", "198.51.100.1");
        h.insert("forwarded", HeaderValue::from_static("for=198.51.100.1"));
        assert_eq!(unvouched_forwarding(lb, &h, &none), Some(&FORWARDED));
    }

    #[test]
    fn mapped_ipv6_peer_is_canonical() {
        let ip = client_ip(
            "::ffff:127.0.0.1".parse().unwrap(),
            &HeaderMap::new(),
            &nets(&["127.0.0.1/32"]),
            XFF,
        );
        assert_eq!(ip, "127.0.0.1".parse::<IpAddr>().unwrap());
    }
}
