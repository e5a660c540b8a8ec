//! The gRPC listeners: `[rls]` and `[ext_authz]` on one address are one server serving both,
//! with the standard health and reflection services beside them (Kubernetes' gRPC probes and
//! `grpcurl` without proto files); and a gRPC request that has not fully arrived within
//! `server.header_read_timeout` is ended, on either service, as a slow head is on the traffic
//! path.

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use support::ext_authz::{self, Described};
use support::gateway::Gateway;
use support::redis::RedisServer;
use support::rls;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

const LIMITS: &str = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n";

/// A gateway serving `[rls]` and `[ext_authz]` on `ext_authz_listen` (`127.0.0.1:0` shares the
/// rate-limit service's), with `server` settings.
async fn gateway(redis: &RedisServer, ext_authz_listen: &str, server: &str) -> Gateway {
    let extra = format!(
        "[ext_authz]\nlisten = \"{ext_authz_listen}\"\n\n[[routes]]\nname = \"otp\"\npath = \"/api/otp/*\"\nupstream = \"up\"\nkey = [\"ip\"]\n  [[routes.limits]]\n  name = \"per-ip\"\n  limit = 3\n  window = \"1m\"\n"
    );
    let toml = rls::config(redis, &support::unique_prefix("grpc"), "", &extra);
    let toml = support::gateway::with_server(&toml, server);
    rls::start(&toml, &[("limits.yaml", LIMITS)]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_serves_both_services_with_health_and_reflection() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "127.0.0.1:0", "").await;
    let running = gw.running();
    assert_eq!(running.rls_addr, running.ext_authz_addr);
    let url = format!("http://{}", running.rls_addr.unwrap());
    // Both services answer on the one address.
    let mut rls_client = rls::client(&gw).await;
    let answer = rls::ask(
        &mut rls_client,
        rls::request("edge", vec![rls::remote_address("203.0.113.1")]),
    )
    .await;
    assert_eq!(answer.statuses[0].limit_remaining, 4);
    let mut authz = ext_authz::client(&gw).await;
    let allowed = ext_authz::check(
        &mut authz,
        &Described::post_json("/api/otp/send", "{}", "203.0.113.1"),
    )
    .await;
    assert_eq!(allowed.header("x-ratelimit-remaining"), Some("2"));
    // Health: the server as a whole and each service by name.
    let channel = tonic::transport::Channel::from_shared(url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel.clone());
    for service in [
        "",
        "envoy.service.ratelimit.v3.RateLimitService",
        "envoy.service.auth.v3.Authorization",
    ] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, 1, "`{service}` is SERVING");
    }
    // Reflection: the services listed, and the files that describe them (with every file they
    // import, so that a client can build the messages).
    let mut reflection = ServerReflectionClient::new(channel);
    let ask = |request: MessageRequest| {
        tokio_stream::once(ServerReflectionRequest {
            host: String::new(),
            message_request: Some(request),
        })
    };
    let names = listed_services(&mut reflection).await;
    for service in [
        "envoy.service.ratelimit.v3.RateLimitService",
        "envoy.service.auth.v3.Authorization",
        "grpc.health.v1.Health",
    ] {
        assert!(names.iter().any(|n| n == service), "{service} in {names:?}");
    }
    // As grpcurl does: the file of the symbol, then each file it imports, by name.
    let mut files = std::collections::BTreeMap::new();
    let mut wanted = vec![MessageRequest::FileContainingSymbol(
        "envoy.service.auth.v3.Authorization".into(),
    )];
    while let Some(request) = wanted.pop() {
        let mut answers = reflection
            .server_reflection_info(ask(request.clone()))
            .await
            .unwrap()
            .into_inner();
        let served = match answers.message().await.unwrap().unwrap().message_response {
            Some(MessageResponse::FileDescriptorResponse(f)) => f.file_descriptor_proto,
            other => panic!("{request:?}: {other:?}"),
        };
        for bytes in served {
            let file: prost_types::FileDescriptorProto =
                prost::Message::decode(bytes.as_slice()).unwrap();
            for dependency in &file.dependency {
                if !files.contains_key(dependency) {
                    wanted.push(MessageRequest::FileByFilename(dependency.clone()));
                }
            }
            files.insert(file.name().to_string(), file);
        }
        assert!(files.len() < 100, "a bounded set of files");
    }
    assert!(files.contains_key("envoy/service/auth/v3/external_auth.proto"));
    assert!(files.contains_key("envoy/service/auth/v3/attribute_context.proto"));
    gw.stop().await;
}

/// The services reflection lists.
async fn listed_services(
    reflection: &mut ServerReflectionClient<tonic::transport::Channel>,
) -> Vec<String> {
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection
        .server_reflection_info(tokio_stream::once(request))
        .await
        .unwrap()
        .into_inner();
    match answers.message().await.unwrap().unwrap().message_response {
        Some(MessageResponse::ListServicesResponse(l)) => {
            l.service.into_iter().map(|s| s.name).collect()
        }
        other => panic!("{other:?}"),
    }
}

/// On two addresses, each listener's reflection lists the service it serves, not the other's
/// (a client that picks a listed service gets an answer, not `UNIMPLEMENTED`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_listener_lists_only_what_it_serves() {
    let redis = RedisServer::start();
    let apart = format!("127.0.0.1:{}", support::free_port());
    let gw = gateway(&redis, &apart, "").await;
    let running = gw.running();
    let (rls_addr, ext_authz_addr) = (running.rls_addr.unwrap(), running.ext_authz_addr.unwrap());
    assert_ne!(rls_addr, ext_authz_addr);
    let rls = "envoy.service.ratelimit.v3.RateLimitService";
    let authz = "envoy.service.auth.v3.Authorization";
    for (addr, served, other) in [(rls_addr, rls, authz), (ext_authz_addr, authz, rls)] {
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let names = listed_services(&mut ServerReflectionClient::new(channel)).await;
        assert!(names.iter().any(|n| n == served), "{served} in {names:?}");
        assert!(
            names.iter().any(|n| n == "grpc.health.v1.Health"),
            "{names:?}"
        );
        assert!(
            !names.iter().any(|n| n == other),
            "{other} not in {names:?}"
        );
    }
    gw.stop().await;
}

/// Opens a gRPC call to `path` on `addr` and sends half of a 100-byte message, never ending
/// it; how long until the server ends the call, and its `grpc-status`.
async fn unfinished_call(addr: std::net::SocketAddr, path: &str) -> (Duration, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(stream).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(request, false).unwrap();
    let mut half = vec![0u8, 0, 0, 0, 100];
    half.extend_from_slice(&[0u8; 50]);
    send.send_data(Bytes::from(half), false).unwrap();
    let started = Instant::now();
    let ended = async {
        let response = response.await.unwrap();
        let status = response.headers().get("grpc-status").cloned();
        let mut body = response.into_body();
        while let Some(chunk) = body.data().await {
            let _ = chunk;
        }
        let trailers = body.trailers().await.ok().flatten();
        status
            .or_else(|| trailers.and_then(|t| t.get("grpc-status").cloned()))
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let status = tokio::time::timeout(Duration::from_secs(5), ended)
        .await
        .expect("the server ends an unfinished call");
    drop(send);
    (started.elapsed(), status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_grpc_request_is_ended_after_header_read_timeout() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "127.0.0.1:0", "header_read_timeout = \"400ms\"").await;
    let addr = gw.running().rls_addr.unwrap();
    for path in [
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        "/envoy.service.auth.v3.Authorization/Check",
    ] {
        let (took, status) = unfinished_call(addr, path).await;
        assert!(
            took >= Duration::from_millis(350),
            "{path}: ended after {took:?}"
        );
        assert!(
            !status.is_empty() && status != "0",
            "{path}: grpc-status {status}"
        );
    }
    gw.stop().await;
}
