//! [`Ending`]: what an attempt still owes the store once its answer's head has gone out: the
//! slots it holds in flight (`algorithm = "concurrency"`), freed when the answer has been sent
//! whole, and the costs its body states (`cost_from = "json:..."`, `"sse:..."`), read as the
//! body streams past ([`Ending::feed`]) and settled at its end. When a client leaves before the
//! end, the body is still read for its costs (by whoever holds it: the layer, within the
//! upstream's `timeout`), and the slots stay held until that read ends, so leaving early dodges
//! neither a cost the answer states nor the limit on answers in flight. An ending dropped
//! unfinished (nothing left to read) frees its slots and keeps its reservations.

use std::time::Duration;

use super::charged::Charged;
use super::outcome_rule::AtEnd;
use crate::cost::CostReader;

/// An attempt's settlement at the end of its answer.
pub struct Ending {
    charged: Option<Charged>,
    /// Whether it still holds slots in flight.
    slots: bool,
    /// The limits whose cost the body states, each with its reader.
    readers: Vec<(usize, CostReader)>,
}

impl Ending {
    /// The ending of `charged`, when anything waits for the answer's end.
    pub(super) fn new(charged: Charged, readers: Vec<(usize, CostReader)>) -> Option<Ending> {
        let slots = holds_slots(&charged);
        (slots || !readers.is_empty()).then_some(Ending {
            charged: Some(charged),
            slots,
            readers,
        })
    }

    /// Whether anything of `charged` waits for the answer's end: a slot in flight, or a cost
    /// its body states (a reader in `readers`).
    pub(super) fn awaited(charged: &Charged, readers: &[(usize, CostReader)]) -> bool {
        holds_slots(charged) || !readers.is_empty()
    }

    /// Reads the next chunk of the answer's body.
    pub fn feed(&mut self, bytes: &[u8]) {
        for (_, reader) in &mut self.readers {
            reader.feed(bytes);
        }
    }

    /// Whether the rest of the body may still state a cost (a body whose client left is read on
    /// only then).
    pub fn reading(&self) -> bool {
        self.readers.iter().any(|(_, r)| !r.hopeless())
    }

    /// How long the rest of an answer whose client left is read: the upstream's `timeout`.
    pub fn read_within(&self) -> Duration {
        self.charged
            .as_ref()
            .map_or(Duration::ZERO, |c| c.policy.config.answer_timeout)
    }

    /// The answer ended (sent whole, or broken off): slots freed, each cost the body stated
    /// charged (the reservation kept where it stated none).
    pub fn finish(mut self) {
        let Some(charged) = self.charged.take() else {
            return;
        };
        let stated: Vec<(usize, Option<u64>)> = std::mem::take(&mut self.readers)
            .into_iter()
            .map(|(i, reader)| (i, reader.finish()))
            .collect();
        let settled = charged.at_end(self.slots, &stated);
        charged.send_last(settled);
    }
}

/// Whether the charge holds slots in flight (`algorithm = "concurrency"`).
fn holds_slots(charged: &Charged) -> bool {
    (charged.policy.outcomes.iter().flatten()).any(|r| matches!(r.at_end, Some(AtEnd::Slot)))
}

/// Dropped unfinished: nothing holds the slots any more; the costs keep their reservations.
impl Drop for Ending {
    fn drop(&mut self) {
        if let Some(charged) = self.charged.take() {
            let kept: Vec<(usize, Option<u64>)> =
                self.readers.iter().map(|(i, _)| (*i, None)).collect();
            let settled = charged.at_end(self.slots, &kept);
            charged.send_last(settled);
        }
    }
}
