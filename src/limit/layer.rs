//! [`RateLimitLayer`]: the tower layer that puts rate limiting in front of a service (the
//! proxy). It holds the shared gateway state behind one `Arc`, so every service it makes, and
//! every clone of one, decides against the same store, deny cache and counters.

use std::sync::Arc;

use tower::Layer;

use super::RateLimit;
use crate::state::GatewayState;

/// Wraps a service in [`RateLimit`].
#[derive(Clone)]
pub struct RateLimitLayer {
    state: Arc<GatewayState>,
}

impl RateLimitLayer {
    /// A layer deciding with `state`.
    pub fn new(state: Arc<GatewayState>) -> Self {
        RateLimitLayer { state }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit::new(inner, self.state.clone())
    }
}
