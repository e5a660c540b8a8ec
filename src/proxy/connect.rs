//! Upstream connects that survive a burst: a connect that fails (refused, reset, a full listen
//! backlog) or has not completed is retried until the upstream's `connect_timeout` is spent,
//! with a short doubling pause between attempts. Nothing of the request has been sent yet, so a
//! retry is always safe; only when the whole budget is gone does the request get a 502.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Uri;
use tower::{Service, ServiceExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// First pause between attempts; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_millis(200);

/// Wraps a connector so each connect is retried within `budget`.
#[derive(Clone)]
pub struct RetryConnect<C> {
    inner: C,
    budget: Duration,
}

impl<C> RetryConnect<C> {
    /// Retries `inner`'s connects for up to `budget` in all.
    pub fn new(inner: C, budget: Duration) -> Self {
        RetryConnect { inner, budget }
    }
}

/// The whole budget passed without a connection.
#[derive(Debug, thiserror::Error)]
#[error("no connection within {0:?} (last error: {1})")]
pub struct ConnectTimeout(Duration, String);

impl<C> Service<Uri> for RetryConnect<C>
where
    C: Service<Uri> + Clone + Send + 'static,
    C::Future: Send,
    C::Response: Send,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let mut inner = self.inner.clone();
        let budget = self.budget;
        Box::pin(async move {
            let deadline = Instant::now() + budget;
            let mut pause = FIRST_PAUSE;
            let mut last = String::from("none yet");
            loop {
                let attempt = async {
                    let ready = inner.ready().await.map_err(Into::into)?;
                    ready.call(uri.clone()).await.map_err(Into::into)
                };
                match tokio::time::timeout_at(deadline.into(), attempt).await {
                    Ok(Ok(connection)) => return Ok(connection),
                    Ok(Err(e)) => last = e.to_string(),
                    Err(_) => return Err(ConnectTimeout(budget, last).into()),
                }
                if Instant::now() + pause >= deadline {
                    return Err(ConnectTimeout(budget, last).into());
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
        })
    }
}
