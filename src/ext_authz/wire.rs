//! A `CheckRequest` read off the wire with its strings taken as bytes ([`ReadCheck`]). Envoy
//! puts the request's body in `body`, a protobuf `string`, when `pack_as_bytes` is off, and a
//! header value or path may carry bytes that are not UTF-8: decoded strictly, such a `Check`
//! would end in an error status, which an Envoy with `failure_mode_allow: true` reads as "let it
//! through", unlimited. Here it is decided like any other: `body` keeps its bytes exactly (as
//! `raw_body`, which the request is read from first), the other strings have each sequence that
//! is not UTF-8 replaced by U+FFFD.
//!
//! Only the fields the gateway reads are kept (the source address, the instant Envoy took the
//! request, and the HTTP request); the others are skipped unread. Each read also gives the
//! request's fingerprint, which tells a retried `Check` from another request (`super::repeats`).

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::OnceLock;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{Address, HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer, Request};
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest};
use envoy_types::pb::google::protobuf::Timestamp;
use prost::Message;

use crate::grpc_unary::{text, ReadRequest};

/// A `CheckRequest` as read, with its fingerprint.
pub struct ReadCheck {
    /// The request, its strings as text.
    pub check: CheckRequest,
    /// A hash of what the request is (its id, method, path, host, headers in any order, body,
    /// source and instant), keyed per process: equal for a retried `Check` of one request.
    pub fingerprint: u64,
}

#[derive(Clone, PartialEq, Message)]
struct WireCheck {
    #[prost(message, optional, tag = "1")]
    attributes: Option<WireAttributes>,
}

#[derive(Clone, PartialEq, Message)]
struct WireAttributes {
    #[prost(message, optional, tag = "1")]
    source: Option<WirePeer>,
    #[prost(message, optional, tag = "4")]
    request: Option<WireRequest>,
}

/// The peer's address as Envoy encoded it (read apart: an address that cannot be read is only
/// an unknown source).
#[derive(Clone, PartialEq, Message)]
struct WirePeer {
    #[prost(bytes = "vec", tag = "1")]
    address: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct WireRequest {
    #[prost(message, optional, tag = "1")]
    time: Option<Timestamp>,
    #[prost(message, optional, tag = "2")]
    http: Option<WireHttp>,
}

#[derive(Clone, PartialEq, Message)]
struct WireHttp {
    #[prost(bytes = "vec", tag = "1")]
    id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    method: Vec<u8>,
    /// The `headers` map's entries (a map is a repeated entry of key 1 and value 2).
    #[prost(message, repeated, tag = "3")]
    headers: Vec<WireHeader>,
    #[prost(bytes = "vec", tag = "4")]
    path: Vec<u8>,
    #[prost(bytes = "vec", tag = "5")]
    host: Vec<u8>,
    /// The request's size in bytes (-1: unknown): a body sent shorter was cut short.
    #[prost(int64, tag = "9")]
    size: i64,
    #[prost(bytes = "vec", tag = "11")]
    body: Vec<u8>,
    #[prost(bytes = "vec", tag = "12")]
    raw_body: Vec<u8>,
    #[prost(message, optional, tag = "13")]
    header_map: Option<WireHeaderMap>,
}

#[derive(Clone, PartialEq, Message)]
struct WireHeaderMap {
    #[prost(message, repeated, tag = "1")]
    headers: Vec<WireHeader>,
}

/// A header: a `headers` map entry (key, value) or a `header_map` one (key, value, raw value).
#[derive(Clone, PartialEq, Message, Hash, Eq, PartialOrd, Ord)]
struct WireHeader {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    raw_value: Vec<u8>,
}

impl ReadRequest for ReadCheck {
    fn read(bytes: Bytes) -> Result<ReadCheck, String> {
        let mut wire = WireCheck::decode(bytes).map_err(|e| format!("not a CheckRequest: {e}"))?;
        let fingerprint = fingerprint(&mut wire);
        Ok(ReadCheck {
            check: wire.into(),
            fingerprint,
        })
    }
}

/// The fingerprint of `wire`, its headers sorted first (a map's entries come in any order).
fn fingerprint(wire: &mut WireCheck) -> u64 {
    static KEY: OnceLock<std::hash::RandomState> = OnceLock::new();
    let mut hasher = KEY.get_or_init(std::hash::RandomState::new).build_hasher();
    if let Some(attributes) = &mut wire.attributes {
        if let Some(request) = &mut attributes.request {
            if let Some(http) = &mut request.http {
                http.headers.sort_unstable();
                if let Some(map) = &mut http.header_map {
                    map.headers.sort_unstable();
                }
                let h = &*http;
                (&h.id, &h.method, &h.path, &h.host, &h.body, &h.raw_body).hash(&mut hasher);
                h.size.hash(&mut hasher);
                h.headers.hash(&mut hasher);
                h.header_map.as_ref().map(|m| &m.headers).hash(&mut hasher);
            }
            (request.time.as_ref())
                .map(|t| (t.seconds, t.nanos))
                .hash(&mut hasher);
        }
        attributes
            .source
            .as_ref()
            .map(|s| &s.address)
            .hash(&mut hasher);
    }
    hasher.finish()
}

impl From<WireCheck> for CheckRequest {
    fn from(wire: WireCheck) -> CheckRequest {
        let attributes = wire.attributes.map(|a| AttributeContext {
            source: a.source.map(|p| Peer {
                address: (!p.address.is_empty())
                    .then(|| Address::decode(p.address.as_slice()).ok())
                    .flatten(),
                ..Peer::default()
            }),
            request: a.request.map(|r| Request {
                time: r.time,
                http: r.http.map(Into::into),
            }),
            ..AttributeContext::default()
        });
        CheckRequest { attributes }
    }
}

impl From<WireHttp> for HttpRequest {
    fn from(w: WireHttp) -> HttpRequest {
        let headers = (w.headers.into_iter())
            .map(|h| (text(h.key), text(h.value)))
            .collect();
        let header_map = w.header_map.map(|m| HeaderMap {
            headers: (m.headers.into_iter())
                .map(|h| HeaderValue {
                    key: text(h.key),
                    value: text(h.value),
                    raw_value: h.raw_value,
                })
                .collect(),
        });
        // `body`'s bytes as they came: `raw_body` when Envoy sent none there
        let raw_body = match w.raw_body.is_empty() {
            true => w.body,
            false => w.raw_body,
        };
        HttpRequest {
            id: text(w.id),
            method: text(w.method),
            headers,
            path: text(w.path),
            host: text(w.host),
            raw_body,
            size: w.size,
            header_map,
            ..HttpRequest::default()
        }
    }
}
