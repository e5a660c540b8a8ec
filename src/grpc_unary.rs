//! One unary gRPC method served with a request read by its own code ([`ReadRequest`]) rather
//! than a generated codec: Envoy copies request bytes into protobuf `string` fields as they
//! came (a header, a descriptor value, a body may hold bytes that are not UTF-8), and a strict
//! decoder ends such a call with an error status, which Envoy's defaults (`failure_mode_deny:
//! false` for the rate-limit service, `failure_mode_allow` where an operator set it for
//! ext_authz) read as "no limit". A method's reader takes those strings as bytes instead
//! ([`text`]), so such a request is decided like any other.
//!
//! Differences from the generated server: any other path of the service is `UNIMPLEMENTED`,
//! and the answer is encoded as protobuf encodes it.

use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::Status;

/// A future an answer comes from.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A request message read from its bytes by the method's own code.
pub trait ReadRequest: Sized + Send + 'static {
    /// The message in `bytes`; a text of why not.
    fn read(bytes: Bytes) -> Result<Self, String>;
}

/// One unary method: its service, path and answer.
pub trait UnaryMethod: Send + Sync + 'static {
    /// The service's full name.
    const SERVICE: &'static str;
    /// The method's path (`/SERVICE/Method`).
    const PATH: &'static str;
    /// The largest request message taken, in bytes.
    const MAX_MESSAGE_BYTES: usize;
    /// The request, as read.
    type Request: ReadRequest;
    /// The answer.
    type Response: prost::Message + Send + 'static;

    /// The answer to `request`, or the status the call ends with; `answer_by` is when the
    /// caller stops waiting, when it set a deadline (see [`answer_by`]).
    fn respond(
        self: Arc<Self>,
        request: Self::Request,
        answer_by: Option<Instant>,
    ) -> BoxFuture<Result<Self::Response, Status>>;
}

/// When an answer must be sent for the caller to still read it: the call's deadline
/// ([`grpc_timeout`], from its arrival) less a tenth of its timeout for the answer to travel
/// back. `None` without a deadline.
fn answer_by(headers: &http::HeaderMap) -> Option<Instant> {
    let timeout = grpc_timeout(headers)?;
    Instant::now().checked_add(timeout - timeout / 10)
}

/// The call's timeout, from its `grpc-timeout` header (at most 8 digits and a unit: `H`, `M`,
/// `S`, `m`, `u`, `n`); `None` without one, or with one that is not a gRPC timeout.
fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount * 3600),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// Text of `bytes`, each sequence that is not UTF-8 replaced by U+FFFD (no copy when it is):
/// two such spellings may read the same, so their counts merge and no value escapes its count.
pub fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The call's [`answer_by`], carried from its HTTP request to its gRPC one.
#[derive(Clone, Copy)]
struct AnswerBy(Instant);

/// A [`UnaryMethod`] served over gRPC.
pub struct UnaryServer<M>(Arc<M>);

impl<M> UnaryServer<M> {
    /// `method`, served.
    pub fn new(method: M) -> UnaryServer<M> {
        UnaryServer(Arc::new(method))
    }
}

impl<M> Clone for UnaryServer<M> {
    fn clone(&self) -> Self {
        UnaryServer(self.0.clone())
    }
}

impl<M: UnaryMethod> NamedService for UnaryServer<M> {
    const NAME: &'static str = M::SERVICE;
}

impl<M: UnaryMethod> tower::Service<http::Request<tonic::body::Body>> for UnaryServer<M> {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        if request.uri().path() != M::PATH {
            let status = Status::unimplemented("no such method");
            return Box::pin(std::future::ready(Ok(status.into_http())));
        }
        let server = self.clone();
        let answer_by = answer_by(request.headers());
        let mut request = request;
        if let Some(by) = answer_by {
            request.extensions_mut().insert(AnswerBy(by));
        }
        Box::pin(async move {
            let codec = ReadCodec::<M::Request, M::Response>(PhantomData);
            let mut grpc =
                Grpc::new(codec).apply_max_message_size_config(Some(M::MAX_MESSAGE_BYTES), None);
            Ok(grpc.unary(server, request).await)
        })
    }
}

impl<M: UnaryMethod> UnaryService<M::Request> for UnaryServer<M> {
    type Response = M::Response;
    type Future = BoxFuture<Result<tonic::Response<M::Response>, Status>>;

    fn call(&mut self, request: tonic::Request<M::Request>) -> Self::Future {
        let answer_by = request.extensions().get::<AnswerBy>().map(|a| a.0);
        let answer = self.0.clone().respond(request.into_inner(), answer_by);
        Box::pin(async move { answer.await.map(tonic::Response::new) })
    }
}

/// Requests read with [`ReadRequest`], answers encoded as protobuf.
struct ReadCodec<Req, Resp>(PhantomData<fn() -> (Req, Resp)>);

impl<Req, Resp> Codec for ReadCodec<Req, Resp>
where
    Req: ReadRequest,
    Resp: prost::Message + Send + 'static,
{
    type Encode = Resp;
    type Decode = Req;
    type Encoder = ReadCodec<Req, Resp>;
    type Decoder = ReadCodec<Req, Resp>;

    fn encoder(&mut self) -> Self::Encoder {
        ReadCodec(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ReadCodec(PhantomData)
    }
}

impl<Req, Resp: prost::Message> Encoder for ReadCodec<Req, Resp> {
    type Item = Resp;
    type Error = Status;

    fn encode(&mut self, item: Resp, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the answer: {e}")))
    }
}

impl<Req: ReadRequest, Resp> Decoder for ReadCodec<Req, Resp> {
    type Item = Req;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Req>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        Req::read(bytes).map(Some).map_err(Status::invalid_argument)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout(value: &str) -> Option<Duration> {
        let mut headers = http::HeaderMap::new();
        headers.insert("grpc-timeout", value.parse().unwrap());
        grpc_timeout(&headers)
    }

    #[test]
    fn a_grpc_timeout_is_read_in_its_unit() {
        let ms = Duration::from_millis;
        assert_eq!(timeout("200m"), Some(ms(200)));
        assert_eq!(timeout("2S"), Some(ms(2000)));
        assert_eq!(timeout("1M"), Some(ms(60_000)));
        assert_eq!(timeout("1H"), Some(ms(3_600_000)));
        assert_eq!(timeout("200000u"), Some(ms(200)));
        assert_eq!(timeout("99999999n"), Some(Duration::from_nanos(99_999_999)));
        for bad in ["", "m", "200", "200x", "123456789m", "-1m", "2.5S", "+1m"] {
            assert_eq!(timeout(bad), None, "{bad:?}");
        }
        assert_eq!(grpc_timeout(&http::HeaderMap::new()), None);
    }
}
