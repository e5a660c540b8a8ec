//! The host a `header:host` part counts: the request's authority before `Host`, one spelling of
//! a host.

use http::{HeaderMap, HeaderValue, Method};

use super::*;
use crate::config::{KeyPart, KeySpec};

/// `header:host` reads the target's authority before `Host`, in one spelling (HTTP/2 sends no
/// `Host`); another `Host` beside it is ambiguous.
#[test]
fn a_host_part_reads_the_authority_the_request_is_for() {
    let spec = KeySpec::of([KeyPart::Header(http::header::HOST)]);
    let key = |authority: Option<&str>, host: Option<&'static str>| {
        let mut h = HeaderMap::new();
        if let Some(host) = host {
            h.insert(http::header::HOST, HeaderValue::from_static(host));
        }
        let src = KeySource {
            route: "tenants",
            method: &Method::GET,
            path: "/",
            path_case: PathCase::Insensitive,
            query: None,
            headers: &h,
            authority,
            body: None,
            client_ip: "203.0.113.7".parse().unwrap(),
            ipv6_prefix: 64,
            jwt: None,
            hash_secret: None,
        };
        derive_key(&spec, OnMissingKey::Reject, &src)
    };
    for (authority, host) in [
        (None, Some("tenant-a")),
        (Some("tenant-a"), None),
        (Some("tenant-a"), Some("TENANT-A")),
        (Some("TENANT-A:80"), None),
        (None, Some("tenant-a.")),
        (Some("tenant-a:80"), Some("tenant-a")),
    ] {
        assert_eq!(
            key(authority, host).unwrap(),
            "tenant-a",
            "{authority:?} {host:?}"
        );
    }
    assert!(matches!(
        key(Some("tenant-a"), Some("rotated-1")),
        Err(KeyError::Ambiguous { .. })
    ));
}
