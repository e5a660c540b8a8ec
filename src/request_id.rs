//! `X-Request-Id`: kept when a trusted proxy sends one (so a request can be followed across
//! hops), generated otherwise, forwarded upstream, returned to the client, and written in the
//! access log and every error body. Generated ids are 32 hex digits: a random per-process prefix
//! and a counter, unique without a random draw per request.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use http::{HeaderMap, HeaderName, HeaderValue};

/// `X-Request-Id`
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Longest id kept from a trusted peer; longer ones are replaced.
const MAX_KEPT_LEN: usize = 128;

/// The id of one request (a request extension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(HeaderValue);

impl RequestId {
    /// The id a request gets: the trusted peer's when it sent a usable one, else a new one.
    pub fn for_request(headers: &HeaderMap, peer_trusted: bool) -> RequestId {
        if peer_trusted {
            if let Some(v) = headers.get(&X_REQUEST_ID) {
                let usable = !v.is_empty()
                    && v.len() <= MAX_KEPT_LEN
                    && v.as_bytes().iter().all(|b| b.is_ascii_graphic());
                if usable {
                    return RequestId(v.clone());
                }
            }
        }
        RequestId::generate()
    }

    /// A fresh id.
    pub fn generate() -> RequestId {
        static PREFIX: OnceLock<u64> = OnceLock::new();
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let prefix = *PREFIX.get_or_init(|| {
            let random = std::collections::hash_map::RandomState::new();
            std::hash::BuildHasher::hash_one(
                &random,
                (std::process::id(), std::time::SystemTime::now()),
            )
        });
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut text = [0u8; 32];
        hex(prefix, &mut text[..16]);
        hex(n, &mut text[16..]);
        RequestId(HeaderValue::from_bytes(&text).expect("hex digits are a valid header value"))
    }

    /// As a header value.
    pub fn header_value(&self) -> &HeaderValue {
        &self.0
    }

    /// As text.
    pub fn as_str(&self) -> &str {
        self.0.to_str().unwrap_or("")
    }
}

/// Writes `value` as 16 lower-case hex digits into `out`.
fn hex(value: u64, out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = DIGITS[((value >> (60 - 4 * i)) & 0xf) as usize];
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_trusted_peers_choose_the_id() {
        let mut h = HeaderMap::new();
        h.insert(&X_REQUEST_ID, HeaderValue::from_static("abc-123"));
        assert_eq!(RequestId::for_request(&h, true).as_str(), "abc-123");
        assert_ne!(RequestId::for_request(&h, false).as_str(), "abc-123");
        h.insert(&X_REQUEST_ID, HeaderValue::from_static("has space"));
        assert_ne!(RequestId::for_request(&h, true).as_str(), "has space");
    }

    #[test]
    fn generated_ids_are_unique_hex() {
        let a = RequestId::generate();
        let b = RequestId::generate();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
    }
}
