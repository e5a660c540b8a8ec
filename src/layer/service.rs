//! [`RateLimit`], the layer's service: cloning it shares the limiter; each call makes one
//! [`ResponseFuture`] that decides and then calls the inner service it was handed ready.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use tower::Service;

use super::body::{BoxError, RequestBody, ResponseBody};
use super::future::ResponseFuture;
use super::shared::Shared;

/// The rate limit in front of `S`.
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> RateLimit<S> {
    /// `inner` behind the limits of `shared`.
    pub fn new(inner: S, shared: Arc<Shared>) -> Self {
        RateLimit { inner, shared }
    }
}

impl<S: Clone> Clone for RateLimit<S> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S, B, ResB> Service<Request<B>> for RateLimit<S>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResB>> + Clone,
    S::Future: Send + 'static,
    S::Error: 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The clone takes the place of the service that is ready (tower's usual swap), so the
        // future calls a service whose readiness was polled.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::start(&self.shared, ready, req)
    }
}
