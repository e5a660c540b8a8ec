//! [`RateLimitLayer`]: the tower layer that puts rate limiting in front of a service (the
//! proxy). It holds the [`Limiter`] behind one `Arc`, so every service it makes, and every
//! clone of one, decides against the same store, deny cache and counters.

use std::sync::Arc;

use tower::Layer;

use super::{Limiter, RateLimit};

/// Wraps a service in [`RateLimit`].
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Arc<Limiter>,
}

impl RateLimitLayer {
    /// A layer deciding with `limiter`.
    pub fn new(limiter: Arc<Limiter>) -> Self {
        RateLimitLayer { limiter }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit::new(inner, self.limiter.clone())
    }
}
