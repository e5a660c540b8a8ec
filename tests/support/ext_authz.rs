//! Envoy's external authorization (`Check`) in tests: a gateway serving `[ext_authz]`
//! deciding in a real Redis, a tonic client built from Envoy's own types, and the
//! `CheckRequest` Envoy's `ext_authz` filter sends for an HTTP request (method, path with its
//! query, host, lower-cased headers, the body as `raw_body` with `pack_as_bytes`, the
//! downstream address as `source`).

use envoy_types::pb::envoy::config::core::v3::address::Address;
use envoy_types::pb::envoy::config::core::v3::{socket_address, SocketAddress};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest, CheckResponse};
use tonic::transport::Channel;

use super::gateway::Gateway;

/// `google.rpc.Code` OK and PERMISSION_DENIED.
pub const OK: i32 = 0;
pub const PERMISSION_DENIED: i32 = 7;

/// A tonic client of `gw`'s `Check`.
pub async fn client(gw: &Gateway) -> AuthorizationClient<Channel> {
    let addr = gw
        .running()
        .ext_authz_addr
        .expect("the gateway serves [ext_authz]");
    AuthorizationClient::connect(format!("http://{addr}"))
        .await
        .expect("the ext_authz service accepts a connection")
}

/// What Envoy sends for one HTTP request.
#[derive(Clone)]
pub struct Described {
    pub id: String,
    pub method: String,
    pub path: String,
    pub host: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub source: String,
    /// When Envoy took the request (`attributes.request.time`: seconds, nanoseconds).
    pub time: Option<(i64, i32)>,
    /// `attributes.request.http.size` when not the body's length.
    pub size: Option<i64>,
}

impl Described {
    /// `POST path` from `source` with a JSON body (its `content-type` and `content-length`,
    /// as Envoy passes the client's headers).
    pub fn post_json(path: &str, body: &str, source: &str) -> Described {
        Described {
            id: String::new(),
            method: "POST".into(),
            path: path.into(),
            host: "api.example.com".into(),
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("content-length".into(), body.len().to_string()),
            ],
            body: body.as_bytes().to_vec(),
            source: source.into(),
            time: None,
            size: None,
        }
    }

    /// With Envoy's stream id.
    pub fn id(mut self, id: &str) -> Described {
        self.id = id.into();
        self
    }

    /// Taken by Envoy at `seconds` and `nanos` past the epoch.
    pub fn arrived_at(mut self, seconds: i64, nanos: i32) -> Described {
        self.time = Some((seconds, nanos));
        self
    }

    /// With one more header.
    pub fn header(mut self, name: &str, value: &str) -> Described {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The `CheckRequest`, its `headers` map built as Envoy builds it: a header sent twice is
    /// one entry, its copies joined with a bare `,`.
    pub fn check(&self) -> CheckRequest {
        let mut headers: std::collections::HashMap<String, String> = Default::default();
        for (name, value) in &self.headers {
            headers
                .entry(name.clone())
                .and_modify(|joined| {
                    joined.push(',');
                    joined.push_str(value);
                })
                .or_insert_with(|| value.clone());
        }
        headers.insert(":method".into(), self.method.clone());
        headers.insert(":path".into(), self.path.clone());
        headers.insert(":authority".into(), self.host.clone());
        let source = Peer {
            address: Some(envoy_types::pb::envoy::config::core::v3::Address {
                address: Some(Address::SocketAddress(SocketAddress {
                    address: self.source.clone(),
                    port_specifier: Some(socket_address::PortSpecifier::PortValue(40000)),
                    ..SocketAddress::default()
                })),
            }),
            ..Peer::default()
        };
        CheckRequest {
            attributes: Some(AttributeContext {
                source: Some(source),
                request: Some(Request {
                    http: Some(HttpRequest {
                        id: self.id.clone(),
                        method: self.method.clone(),
                        headers,
                        path: self.path.clone(),
                        host: self.host.clone(),
                        scheme: "http".into(),
                        protocol: "HTTP/1.1".into(),
                        size: self.size.unwrap_or(self.body.len() as i64),
                        raw_body: self.body.clone(),
                        ..HttpRequest::default()
                    }),
                    time: self.time.map(|(seconds, nanos)| {
                        envoy_types::pb::google::protobuf::Timestamp { seconds, nanos }
                    }),
                }),
                ..AttributeContext::default()
            }),
        }
    }
}

/// Sends `described`; the answer.
pub async fn check(client: &mut AuthorizationClient<Channel>, described: &Described) -> Answer {
    let response = client
        .check(described.check())
        .await
        .expect("Check answers without a gRPC error")
        .into_inner();
    Answer::of(response)
}

/// A `CheckResponse`, read.
#[derive(Debug, Clone)]
pub struct Answer {
    /// `status.code`.
    pub code: i32,
    /// The denied response's HTTP status (0 when allowed).
    pub http_status: i32,
    /// The headers to add (ok) or of the denied response, in order.
    pub headers: Vec<(String, String)>,
    /// The denied response's body.
    pub body: String,
}

impl Answer {
    pub fn of(response: CheckResponse) -> Answer {
        let code = response.status.as_ref().map_or(-1, |s| s.code);
        let options = |o: &[envoy_types::pb::envoy::config::core::v3::HeaderValueOption]| {
            o.iter()
                .filter_map(|h| h.header.as_ref())
                .map(|h| (h.key.clone(), h.value.clone()))
                .collect::<Vec<_>>()
        };
        match response.http_response {
            Some(HttpResponse::OkResponse(ok)) => Answer {
                code,
                http_status: 0,
                headers: options(&ok.response_headers_to_add),
                body: String::new(),
            },
            Some(HttpResponse::DeniedResponse(denied)) => Answer {
                code,
                http_status: denied.status.map_or(0, |s| s.code),
                headers: options(&denied.headers),
                body: denied.body,
            },
            _ => Answer {
                code,
                http_status: 0,
                headers: Vec::new(),
                body: String::new(),
            },
        }
    }

    /// Allowed: OK.
    pub fn allowed(&self) -> bool {
        self.code == OK
    }

    /// A header's value, its name matched ignoring case as HTTP does.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The denied body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}
