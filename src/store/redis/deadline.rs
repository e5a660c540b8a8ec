//! The one deadline helper of the Redis store: every call to Redis runs under a [`Deadline`], and
//! running out of it is a [`StoreError::Timeout`], whatever the call was.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::store::StoreError;

/// An instant by which a store operation must have answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline {
    at: Instant,
    budget: Duration,
}

impl Deadline {
    /// `budget` from now.
    pub fn after(budget: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + budget,
            budget,
        }
    }

    /// Whether it has passed.
    pub fn passed(&self) -> bool {
        Instant::now() >= self.at
    }

    /// The error for running out of this deadline.
    pub fn timeout(&self) -> StoreError {
        StoreError::Timeout(self.budget)
    }

    /// Runs `operation`, or gives up with a timeout when the deadline passes first.
    pub async fn run<T>(
        &self,
        operation: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout_at(self.at.into(), operation).await {
            Ok(result) => result,
            Err(_) => Err(self.timeout()),
        }
    }
}
