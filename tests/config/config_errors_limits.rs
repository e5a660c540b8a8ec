//! Config validation of durations and limits: each refused fixture pinned to the exact
//! `FILE:LINE:COLUMN: message` an operator sees. The bounds of the README's "Which algorithm" are inclusive and the
//! refusals are exactly at them: a sliding_log limit of 10,000, a counter's limit * window just
//! below 2^53 µs and windows of 1 ms and 366 days load, and so does a route that mixes the
//! algorithms.

use crate::support;

use std::time::Duration;

use slidegate::algorithm::AlgorithmId;
use support::config::{fixture, load_err, load_ok, load_text, no_env};

#[test]
fn bad_duration_window() {
    assert_eq!(
        load_err("bad_duration_window.toml"),
        "bad_duration_window.toml:13:12: routes[0].limits[0].window: `5 parsecs` is not a duration: a duration is a whole number and a unit (ms, s, m, h, d); write it like \"250ms\", \"1s\", \"5m\", \"1h\", \"7d\""
    );
}

#[test]
fn duration_1m_upper_case() {
    assert_eq!(
        load_err("duration_1M.toml"),
        "duration_1M.toml:13:12: routes[0].limits[0].window: `1M` is not a duration: `M` is not a unit (ms, s, m, h, d); write it like \"250ms\", \"1s\", \"5m\", \"1h\", \"7d\""
    );
}

#[test]
fn bad_duration_timeout() {
    assert_eq!(
        load_err("bad_duration_timeout.toml"),
        "bad_duration_timeout.toml:3:11: store.timeout: `fast` is not a duration: a duration is a whole number and a unit (ms, s, m, h, d); write it like \"250ms\", \"1s\", \"5m\", \"1h\", \"7d\""
    );
}

#[test]
fn zero_limit() {
    assert_eq!(
        load_err("zero_limit.toml"),
        "zero_limit.toml:12:11: routes[0].limits[0].limit: must be at least 1, got 0"
    );
}

#[test]
fn negative_limit() {
    assert_eq!(
        load_err("negative_limit.toml"),
        "negative_limit.toml:12:11: routes[0].limits[0].limit: must be at least 1, got -5"
    );
}

#[test]
fn zero_window() {
    assert_eq!(
        load_err("zero_window.toml"),
        "zero_window.toml:13:12: routes[0].limits[0].window: must be between 1ms and 366d, got 0s"
    );
}

#[test]
fn duplicate_limit_name() {
    assert_eq!(
        load_err("duplicate_limit_name.toml"),
        "duplicate_limit_name.toml:16:10: routes[0].limits[1].name: duplicate limit name `burst` in this route"
    );
}

#[test]
fn unknown_algorithm() {
    assert_eq!(
        load_err("unknown_algorithm.toml"),
        "unknown_algorithm.toml:14:15: routes[0].limits[0].algorithm: unknown algorithm `token_bucket`, expected \"sliding_log\", \"sliding_window_counter\", \"gcra\" or \"concurrency\""
    );
}

#[test]
fn sliding_log_over_10000() {
    assert_eq!(
        load_err("sliding_log_over_10000.toml"),
        "sliding_log_over_10000.toml:12:11: routes[0].limits[0].limit: a sliding_log limit holds at most 10000 (it stores one entry per counted unit); for more, use algorithm = \"sliding_window_counter\" or \"gcra\""
    );
}

#[test]
fn counter_limit_times_window_2_53() {
    assert_eq!(
        load_err("counter_limit_times_window_2_53.toml"),
        "counter_limit_times_window_2_53.toml:13:11: routes[0].limits[0].limit: limit * window must stay below 2^53 microseconds for the counter's arithmetic to be exact (here 9007199255 * 1000000 µs); lower the limit or the window"
    );
}

/// The larger of gcra's limit and burst is the value at fault: here the burst, on line 16.
#[test]
fn gcra_burst_times_window_2_53() {
    assert_eq!(
        load_err("gcra_burst_times_window_2_53.toml"),
        "gcra_burst_times_window_2_53.toml:16:11: routes[0].limits[0].burst: burst (or limit) * window must stay below 2^53 microseconds for gcra's arithmetic to be exact (here 9007199255 * 1000000 µs); lower them"
    );
}

#[test]
fn sliding_log_limit_times_window_2_53() {
    assert_eq!(
        load_err("sliding_log_limit_times_window_2_53.toml"),
        "sliding_log_limit_times_window_2_53.toml:13:11: routes[0].limits[0].limit: limit * window must stay below 2^53 microseconds (here 10000 * 950400000000 µs), as for every algorithm; lower the limit or the window"
    );
    let text =
        std::fs::read_to_string(fixture("sliding_log_limit_times_window_2_53.toml")).unwrap();
    let below = text.replace("window = \"11d\"", "window = \"10d\"");
    assert_ne!(below, text);
    assert!(load_text("sliding_log_limit_times_window_2_53.toml", &below).is_ok());
}

/// The bounds are inclusive where the README says so and the refusals above are exactly at them:
/// 10,000 for a sliding_log limit, limit * window just below 2^53 µs for a counter, windows of
/// 1 ms and 366 days.
#[test]
fn limits_and_windows_at_their_bounds_load() {
    let log = std::fs::read_to_string(fixture("sliding_log_over_10000.toml")).unwrap();
    let at_most = log.replace("limit = 10001", "limit = 10000");
    assert_ne!(at_most, log);
    let config = load_text("sliding_log_over_10000.toml", &at_most).unwrap();
    assert_eq!(config.routes[0].limits[0].limit, 10_000);

    let counter = std::fs::read_to_string(fixture("counter_limit_times_window_2_53.toml")).unwrap();
    let below = counter.replace("limit = 9007199255", "limit = 9007199254");
    assert_ne!(below, counter);
    let config = load_text("counter_limit_times_window_2_53.toml", &below).unwrap();
    assert_eq!(config.routes[0].limits[0].limit, 9_007_199_254);

    let window = std::fs::read_to_string(fixture("zero_window.toml")).unwrap();
    for (written, length) in [
        ("1ms", Duration::from_millis(1)),
        ("366d", Duration::from_secs(366 * 24 * 3600)),
    ] {
        let text = window.replace("window = \"0s\"", &format!("window = \"{written}\""));
        assert_ne!(text, window);
        let config = load_text("zero_window.toml", &text)
            .unwrap_or_else(|e| panic!("a window of {written} loads: {e}"));
        assert_eq!(config.routes[0].limits[0].window, length);
    }
    let too_long = window.replace("window = \"0s\"", "window = \"367d\"");
    let err = load_text("zero_window.toml", &too_long).unwrap_err();
    assert!(
        err.to_string().ends_with(
            ":13:12: routes[0].limits[0].window: must be between 1ms and 366d, got 367d"
        ),
        "{err}"
    );
}

#[test]
fn one_route_may_mix_the_algorithms_and_a_limit_without_one_is_a_sliding_log() {
    let config = load_ok(&fixture("mixed_algorithms.toml"), no_env);
    let algorithms: Vec<_> = config.routes[0]
        .limits
        .iter()
        .map(|l| (l.name.as_str(), l.algorithm))
        .collect();
    assert_eq!(
        algorithms,
        [
            ("per-day", AlgorithmId::SLIDING_WINDOW_COUNTER),
            ("per-second", AlgorithmId::SLIDING_LOG)
        ]
    );
}
