//! `host[:port]` as RFC 3986 3.2.2 writes an authority's host: a name of unreserved and
//! sub-delimiter characters (or percent escapes), an IPv4 address, or an IPv6 address in
//! brackets, then an optional port that fits 16 bits. One rule for a request's `Host` and for
//! the hosts of a Redis URL; it reads the text in place (a request's `Host` is checked on every
//! request).

use std::net::Ipv6Addr;

use crate::path::{hex_value, is_unreserved};

/// Whether `text` is a non-empty host with an optional `:port` (no user info, no spaces).
pub fn is_host_and_port(text: &str) -> bool {
    let (host_ok, rest) = match text.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((v6, rest)) => (v6.parse::<Ipv6Addr>().is_ok(), rest),
            None => return false,
        },
        None => {
            let end = text.find(':').unwrap_or(text.len());
            let (name, rest) = text.split_at(end);
            (!name.is_empty() && name.bytes().all(is_name_byte), rest)
        }
    };
    let port_ok = match rest.strip_prefix(':') {
        None => rest.is_empty(),
        Some("") => true,
        Some(port) => port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok(),
    };
    host_ok && port_ok
}

/// One spelling of a `host[:port]`, for a key that counts hosts: lower case (names are case
/// blind), a name's trailing dot dropped (`example.com.` is `example.com`), an IPv6 address
/// in its canonical form (`[0:0::1]` is `[::1]`), and the port dropped where it says nothing: an
/// empty one, or the web's default (80, 443). Text that is no host comes back lower-cased.
pub fn canonical(text: &str) -> String {
    let text = decode_unreserved(text).to_ascii_lowercase();
    let (host, port) = match text.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((v6, rest)) => match v6.parse::<Ipv6Addr>() {
                Ok(ip) => (format!("[{ip}]"), rest.strip_prefix(':')),
                Err(_) => return text,
            },
            None => return text,
        },
        None => match text.split_once(':') {
            Some((name, port)) => (name.trim_end_matches('.').to_string(), Some(port)),
            None => (text.trim_end_matches('.').to_string(), None),
        },
    };
    // a port as its number (`080` is 80)
    match port.map(|p| (p, p.parse::<u16>())) {
        None | Some(("", _)) | Some((_, Ok(80 | 443))) => host,
        Some((_, Ok(port))) => format!("{host}:{port}"),
        Some((port, Err(_))) => format!("{host}:{port}"),
    }
}

/// `text` with its percent-escapes of unreserved characters decoded (RFC 3986 6.2.2.2: `z%39`
/// is `z9`); other escapes stay as written.
fn decode_unreserved(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('%') {
        return std::borrow::Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let digit = |at: usize| bytes.get(at).copied().and_then(hex_value);
        let escaped = match (bytes[i], digit(i + 1), digit(i + 2)) {
            (b'%', Some(hi), Some(lo)) => Some(hi << 4 | lo).filter(|&b| is_unreserved(b)),
            _ => None,
        };
        match escaped {
            Some(b) => {
                out.push(char::from(b));
                i += 3;
            }
            None => {
                // up to the next `%`, as written (a `%` is one byte: a char boundary)
                let next = text[i + 1..].find('%').map_or(text.len(), |n| i + 1 + n);
                out.push_str(&text[i..next]);
                i = next;
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// RFC 3986 `reg-name`: unreserved, sub-delims and `%` of percent escapes.
fn is_name_byte(b: u8) -> bool {
    NAME_BYTES[usize::from(b)]
}

/// [`is_name_byte`] for every byte, worked out once (it runs on every request's `Host`).
static NAME_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let others = b"-._~!$&'()*+,;=%";
    let mut i = 0;
    while i < others.len() {
        table[others[i] as usize] = true;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::{canonical, is_host_and_port};

    #[test]
    fn one_host_has_one_canonical_spelling() {
        for spelling in [
            "tenant-a",
            "TENANT-A",
            "tenant-a.",
            "tenant-a:",
            "tenant-a:80",
            "Tenant-A.:443",
        ] {
            assert_eq!(canonical(spelling), "tenant-a", "{spelling}");
        }
        assert_eq!(canonical("tenant-a:8080"), "tenant-a:8080");
        assert_eq!(canonical("[0:0::1]"), "[::1]");
        assert_eq!(canonical("[0:0::1]:80"), "[::1]");
        assert_eq!(canonical("[::1]:9000"), "[::1]:9000");
        assert_eq!(canonical("10.0.0.1:80"), "10.0.0.1");
        // a port is its number, an escaped unreserved character its character
        for spelling in ["z9:080", "z9:000080", "Z%39", "z%39:0443"] {
            assert_eq!(canonical(spelling), "z9", "{spelling}");
        }
        assert_eq!(canonical("z9:08080"), "z9:8080");
        assert_eq!(canonical("bücher%2e%ZZ"), "bücher.%zz");
    }

    #[test]
    fn hosts_and_ports() {
        for ok in [
            "gw",
            "gw.example:8080",
            "127.0.0.1",
            "[::1]:8080",
            "[::1]",
            "h:",
        ] {
            assert!(is_host_and_port(ok), "{ok}");
        }
        for bad in [
            "",
            "a b",
            "user@host",
            "host:99999",
            "host:80x",
            "[::1",
            "[zz]:1",
            "a/b",
            ":80",
        ] {
            assert!(!is_host_and_port(bad), "{bad}");
        }
    }

    #[test]
    fn name_bytes_are_the_unreserved_the_sub_delimiters_and_percent() {
        for b in 0..=255u8 {
            let listed = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%".contains(&b);
            assert_eq!(super::is_name_byte(b), listed, "byte {b}");
            assert_eq!(
                is_host_and_port(&format!("a{}b", b as char)),
                listed,
                "byte {b}"
            );
        }
    }
}
