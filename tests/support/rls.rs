//! The rate-limit service's tests: a gateway serving `[rls]` with YAML limit files, deciding in
//! a real Redis; a tonic client built from the same Envoy types; and the descriptors Envoy's
//! `ratelimit` filter sends (`remote_address`, `request_headers`, `generic_key`,
//! `header_value_match` actions).

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use tonic::transport::Channel;

use super::gateway::{self, redis_store, Gateway};
use super::redis::RedisServer;

/// A gateway config with `[rls]` reading `limits/` (the files given to [`start`]), `rls` extra
/// settings of the section, deciding in `redis` under `prefix`, and `extra` TOML appended.
pub fn config(redis: &RedisServer, prefix: &str, rls: &str, extra: &str) -> String {
    let store = redis_store(&redis.url(), prefix);
    let base = gateway::config(&store, "http://127.0.0.1:9", extra);
    format!("{base}\n[rls]\nlisten = \"127.0.0.1:0\"\nconfig = \"limits\"\n{rls}\n")
}

/// Starts a gateway from `toml` with the YAML `files` (name, text) in `limits/`.
pub async fn start(toml: &str, files: &[(&str, &str)]) -> Gateway {
    let files: Vec<(String, Vec<u8>)> = files
        .iter()
        .map(|(n, t)| (format!("limits/{n}"), t.as_bytes().to_vec()))
        .collect();
    let files: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    gateway::start_with_files(toml, &files).await
}

/// Starts a gateway on `redis` with one limit file and the `[rls]` settings `rls`.
pub async fn serve(redis: &RedisServer, test: &str, yaml: &str, rls: &str) -> Gateway {
    let toml = config(redis, &super::unique_prefix(test), rls, "");
    start(&toml, &[("limits.yaml", yaml)]).await
}

/// A tonic client of `gw`'s rate-limit service.
pub async fn client(gw: &Gateway) -> RateLimitServiceClient<Channel> {
    let addr = gw.running().rls_addr.expect("the gateway serves [rls]");
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("the rate-limit service accepts a connection")
}

/// A descriptor of (key, value) entries.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

/// What the `remote_address` action sends.
pub fn remote_address(ip: &str) -> RateLimitDescriptor {
    descriptor(&[("remote_address", ip)])
}

/// What the `request_headers` action sends for `header` under `descriptor_key`.
pub fn request_header(descriptor_key: &str, value: &str) -> RateLimitDescriptor {
    descriptor(&[(descriptor_key, value)])
}

/// What the `generic_key` action sends.
pub fn generic_key(value: &str) -> RateLimitDescriptor {
    descriptor(&[("generic_key", value)])
}

/// What the `header_value_match` action sends when its headers match.
pub fn header_match(value: &str) -> RateLimitDescriptor {
    descriptor(&[("header_match", value)])
}

/// `d` with Envoy's own limit (`requests_per_unit` per `unit`, a proto unit code).
pub fn with_override(mut d: RateLimitDescriptor, limit: u32, unit: i32) -> RateLimitDescriptor {
    d.limit = Some(RateLimitOverride {
        requests_per_unit: limit,
        unit,
    });
    d
}

/// `d` with its own `hits_addend`.
pub fn with_hits(mut d: RateLimitDescriptor, hits: u64) -> RateLimitDescriptor {
    d.hits_addend = Some(UInt64Value { value: hits });
    d
}

/// A request of `domain` with `descriptors`.
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors,
        hits_addend: 0,
    }
}

/// Sends `request`; fails the test on a gRPC error or after 10 s.
pub async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    try_ask(client, request)
        .await
        .unwrap_or_else(|s| panic!("ShouldRateLimit failed: {s:?}"))
}

/// Sends `request`, returning the gRPC status of a failure.
pub async fn try_ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> Result<RateLimitResponse, tonic::Status> {
    let call = client.should_rate_limit(request);
    tokio::time::timeout(std::time::Duration::from_secs(10), call)
        .await
        .expect("an answer within 10 s")
        .map(tonic::Response::into_inner)
}

/// `OK` or `OVER_LIMIT`.
pub fn code_name(code: i32) -> &'static str {
    Code::try_from(code).map_or("?", |c| c.as_str_name())
}

/// The overall code's name.
pub fn overall(r: &RateLimitResponse) -> &'static str {
    code_name(r.overall_code)
}

/// Every status's code name, in order.
pub fn codes(r: &RateLimitResponse) -> Vec<&'static str> {
    r.statuses.iter().map(|s| code_name(s.code)).collect()
}

/// The `requests_per_unit` a status names (`None` without a current limit).
pub fn current_limit(s: &DescriptorStatus) -> Option<u32> {
    s.current_limit.as_ref().map(|l| l.requests_per_unit)
}

/// Sends `request` `n` times and returns the overall codes.
pub async fn overall_codes(
    client: &mut RateLimitServiceClient<Channel>,
    request: &RateLimitRequest,
    n: usize,
) -> Vec<&'static str> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(overall(&ask(client, request.clone()).await));
    }
    out
}

/// A header of the answer's `response_headers_to_add`.
pub fn header<'r>(r: &'r RateLimitResponse, name: &str) -> Option<&'r str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}
