//! What a key is read from: the parts of one request ([`KeySource`]), and why a part may give
//! no value ([`Absent`]).

use std::net::IpAddr;

use http::{HeaderMap, Method};

use super::jwt::JwtVerifier;
use crate::config::{HashSecret, PathCase};

/// What a key is derived from: the parts of one request.
pub struct KeySource<'a> {
    /// The matched route's name.
    pub route: &'a str,
    /// The request method.
    pub method: &'a Method,
    /// The request path (normalised, no query).
    pub path: &'a str,
    /// Whether route matching ignores case (then the `path` part is lower-cased).
    pub path_case: PathCase,
    /// The raw query string, if any.
    pub query: Option<&'a str>,
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// The authority of the request's target, when it has one (HTTP/2's `:authority`, an
    /// HTTP/1.1 absolute-form target): the host the request is for, whatever `Host` says.
    pub authority: Option<&'a str>,
    /// The request body, when the route's keys read it.
    pub body: Option<&'a [u8]>,
    /// The client IP after trusted-proxy resolution.
    pub client_ip: IpAddr,
    /// IPv6 clients are keyed by their network of this prefix length.
    pub ipv6_prefix: u8,
    /// The verifier for `jwt:` parts, when `[jwt]` is configured.
    pub jwt: Option<&'a JwtVerifier>,
    /// The secret of `hash = true` parts.
    pub hash_secret: Option<&'a HashSecret>,
}

/// Why a part has no value in the key (`on_missing_key` decides what follows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {
    /// The request does not carry it (or nothing is left of it).
    NotSent,
    /// The request carries something that is not a value: what it must be.
    Invalid(&'static str),
}
