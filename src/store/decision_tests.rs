//! A decision aged by the time its answer took.

use super::*;

#[test]
fn a_limit_whose_wait_has_passed_refuses_no_more() {
    let usage = |secs: u64| LimitUsage {
        used: 3,
        limit: 3,
        reset: Duration::from_secs(secs),
        retry_after: Duration::from_secs(secs),
        in_flight: false,
    };
    let refused = Decision {
        outcome: Outcome::Rejected,
        retry_after: Duration::from_secs(10),
        limits: vec![usage(10), usage(2)],
        ..Decision::unlimited()
    };
    assert_eq!(refused.exceeded_limits().collect::<Vec<_>>(), [0, 1]);
    let later = refused.aged(Duration::from_secs(3));
    assert_eq!(later.exceeded_limits().collect::<Vec<_>>(), [0]);
    assert_eq!(later.retry_after, Duration::from_secs(7));
    assert_eq!(later.rejecting_limit(), Some(0));
}

/// Aged past its reset, a limit still in use says its next unit comes at the next instant
/// (`t` rounds it up to 1 s), not that nothing is counted: the units that came back meanwhile
/// are not in its `used`.
#[test]
fn an_answer_later_than_the_reset_keeps_a_reset() {
    let usage = |used: u64, reset: u64| LimitUsage {
        used,
        limit: 3,
        reset: Duration::from_secs(reset),
        retry_after: Duration::ZERO,
        in_flight: false,
    };
    let mut allowed = Decision {
        limits: vec![usage(2, 2), usage(0, 0), usage(1, 10)],
        ..Decision::unlimited()
    };
    allowed.age(Duration::from_secs(3));
    let resets: Vec<Duration> = allowed.limits.iter().map(|l| l.reset).collect();
    let ms = Duration::from_millis;
    assert_eq!(resets, [ms(1), ms(0), ms(7_000)]);
}
