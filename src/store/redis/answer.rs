//! A decision's answer: the future a caller waits on ([`RedisAnswer`]) and the decoding of its
//! part of a call's reply into a [`Decision`] (with the receipt of its charge when asked).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use super::batch;
use crate::store::{Decision, LimitSet, Receipt, ReceiptPart, StoreError};

/// A decision queued on a lane, decoded when its call's reply arrives.
pub enum RedisAnswer {
    /// Decided without a call (no limits to decide).
    Ready(Option<Result<Decision, StoreError>>),
    /// One call decides it.
    Single(Single),
    /// A cluster request decided one part per slot.
    Split(Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send>>),
}

/// One decision waiting for its call.
pub struct Single {
    pub(super) limits: Arc<LimitSet>,
    pub(super) receiver: oneshot::Receiver<Result<batch::Answer, StoreError>>,
    pub(super) cost: u64,
}

impl Future for RedisAnswer {
    type Output = Result<Decision, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            RedisAnswer::Ready(result) => {
                Poll::Ready((result.take()).expect("an answer is not polled after it is ready"))
            }
            RedisAnswer::Single(s) => {
                let reply = std::task::ready!(Pin::new(&mut s.receiver).poll(cx));
                Poll::Ready(decode(&s.limits, reply, s.cost))
            }
            RedisAnswer::Split(future) => future.as_mut().poll(cx),
        }
    }
}

/// A decision from its part of a call's reply (or the call's error, or a lane that stopped).
fn decode(
    limits: &LimitSet,
    reply: Result<Result<batch::Answer, StoreError>, oneshot::error::RecvError>,
    cost: u64,
) -> Result<Decision, StoreError> {
    match reply {
        Ok(Ok(a)) => {
            let mut decision = Decision::from_reply(limits, &a.values, a.decided_at_us)?;
            if let (Some(member), true) = (a.member, decision.allowed()) {
                decision.receipt = Some(Receipt {
                    parts: vec![ReceiptPart {
                        slot: None,
                        member,
                        decided_at_us: a.decided_at_us,
                        sketched: Vec::new(),
                    }],
                    cost,
                });
            }
            Ok(decision)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(StoreError::Other("the decision lane stopped".into())),
    }
}
