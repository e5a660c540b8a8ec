//! A `RateLimitRequest` read off the wire with its strings taken as bytes. Envoy's actions copy
//! request bytes into descriptor values as they came (a header may carry bytes that are not
//! UTF-8, as HTTP's obs-text allows), and protobuf's `string` refuses those: decoded strictly,
//! the whole call would end in an error status, which Envoy's default `failure_mode_deny:
//! false` reads as "no limit". Here such a value is decided like any other: each sequence that
//! is not UTF-8 becomes U+FFFD, so two such spellings may share a key (their counts merge; no
//! value escapes its count).
//!
//! Differences from the generated codec: only the request's decoding differs (the answer is
//! encoded as protobuf encodes it, by `crate::grpc_unary`); the message types are Envoy's
//! once read.

use bytes::Bytes;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use prost::Message;

use crate::grpc_unary::{text, ReadRequest};

/// `RateLimitRequest` with its strings as bytes (the same fields and tags).
#[derive(Clone, PartialEq, Message)]
struct WireRequest {
    #[prost(bytes = "vec", tag = "1")]
    domain: Vec<u8>,
    #[prost(message, repeated, tag = "2")]
    descriptors: Vec<WireDescriptor>,
    #[prost(uint32, tag = "3")]
    hits_addend: u32,
}

/// `RateLimitDescriptor` with its entries' strings as bytes.
#[derive(Clone, PartialEq, Message)]
struct WireDescriptor {
    #[prost(message, repeated, tag = "1")]
    entries: Vec<WireEntry>,
    #[prost(message, optional, tag = "2")]
    limit: Option<RateLimitOverride>,
    #[prost(message, optional, tag = "3")]
    hits_addend: Option<UInt64Value>,
    #[prost(bool, tag = "4")]
    is_negative_hits: bool,
}

/// A descriptor entry's key and value, as bytes.
#[derive(Clone, PartialEq, Message)]
struct WireEntry {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

impl From<WireRequest> for RateLimitRequest {
    fn from(w: WireRequest) -> RateLimitRequest {
        RateLimitRequest {
            domain: text(w.domain),
            descriptors: w.descriptors.into_iter().map(Into::into).collect(),
            hits_addend: w.hits_addend,
        }
    }
}

impl From<WireDescriptor> for RateLimitDescriptor {
    fn from(w: WireDescriptor) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: (w.entries.into_iter())
                .map(|e| Entry {
                    key: text(e.key),
                    value: text(e.value),
                })
                .collect(),
            limit: w.limit,
            hits_addend: w.hits_addend,
            is_negative_hits: w.is_negative_hits,
        }
    }
}

impl ReadRequest for RateLimitRequest {
    fn read(bytes: Bytes) -> Result<RateLimitRequest, String> {
        let wire =
            WireRequest::decode(bytes).map_err(|e| format!("not a RateLimitRequest: {e}"))?;
        Ok(wire.into())
    }
}
