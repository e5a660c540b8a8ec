//! Config validation of the limits that need the answer (README, "Limits on what is in flight"
//! and "Limits on what the answer says it cost"): each refusal pinned to the exact
//! `FILE:LINE:COLUMN: message`, a concurrency limit's lease defaulting to the upstream's
//! `timeout` plus 5 s, and the warnings for settings nothing reads (a lease on a window limit,
//! `max_cost_body_bytes` with no body to read, such a route through forward auth).

use crate::support;

use std::time::Duration;

use support::config::{fixture, load_text};

const HEAD: &str = "[upstreams.up]\nurl = \"http://127.0.0.1:9\"\ntimeout = \"20s\"\n\n[[routes]]\nname = \"chat\"\npath = \"/v1/*\"\nupstream = \"up\"\n";

/// The error `limits` (after the route's head) gets, its file name cut to `inline.toml`.
fn refused(limits: &str) -> String {
    let text = format!("{HEAD}{limits}");
    let err = load_text("inline.toml", &text)
        .expect_err("refused")
        .to_string();
    let file = fixture("inline.toml").display().to_string();
    format!(
        "inline.toml{}",
        err.strip_prefix(&file).expect("names the file")
    )
}

fn warnings(text: &str) -> Vec<String> {
    let config = load_text("inline.toml", text).unwrap_or_else(|e| panic!("{e}"));
    config.warnings.iter().map(|w| w.message.clone()).collect()
}

#[test]
fn a_concurrency_limit_takes_a_lease_not_a_window() {
    assert_eq!(
        refused("[[routes.limits]]\nname = \"inflight\"\nlimit = 4\nalgorithm = \"concurrency\"\nwindow = \"1m\"\n"),
        "inline.toml:13:10: routes[0].limits[0].window: a concurrency limit counts attempts in flight, not a window: remove it (an attempt holds its slot until its answer has been sent, or `lease` at most)"
    );
    let text = format!(
        "{HEAD}[[routes.limits]]\nname = \"inflight\"\nlimit = 4\nalgorithm = \"concurrency\"\n"
    );
    let config = load_text("inline.toml", &text).unwrap();
    assert_eq!(
        config.routes[0].limits[0].window,
        Duration::from_secs(25),
        "timeout + 5 s"
    );
    assert_eq!(
        refused("[[routes.limits]]\nname = \"per-minute\"\nlimit = 4\n"),
        "inline.toml:9:1: routes[0].limits[0]: missing field `window`"
    );
}

#[test]
fn a_concurrency_limit_counts_no_outcomes_costs_or_waits() {
    assert_eq!(
        refused("[[routes.limits]]\nname = \"inflight\"\nlimit = 4\nalgorithm = \"concurrency\"\ncount_status = [401]\n"),
        "inline.toml:13:16: routes[0].limits[0].count_status: a concurrency limit counts attempts in flight, whatever their answer says: count_status belongs on a window limit"
    );
    assert_eq!(
        refused("on_exceed = \"delay\"\nmax_delay = \"1s\"\n[[routes.limits]]\nname = \"inflight\"\nlimit = 4\nalgorithm = \"concurrency\"\n"),
        "inline.toml:14:13: routes[0].limits[0].algorithm: \"concurrency\" cannot be used on a \"delay\" route: a slot frees when some answer ends, which no one can foresee, so a waiting request would have to ask the store again and again while holding its client's connection open (use \"reject\": a full key gets 429 with Retry-After: 1)"
    );
}

#[test]
fn costs_need_a_source_and_one_reservation_within_the_limit() {
    let limit = "[[routes.limits]]\nname = \"tokens\"\nlimit = 100\nwindow = \"1h\"\n";
    assert_eq!(
        refused(&format!("{limit}cost = 5\n")),
        "inline.toml:13:8: routes[0].limits[0].cost: is what an attempt reserves until its answer states its cost: it needs cost_from"
    );
    assert_eq!(
        refused(&format!("{limit}cost_from = \"body:tokens\"\n")),
        "inline.toml:13:13: routes[0].limits[0].cost_from: unknown cost source `body:tokens`, expected \"header:NAME\", \"json:PATH\" or \"sse:PATH\""
    );
    assert_eq!(
        refused(&format!("{limit}cost_from = \"json:n\"\ncost = 101\n")),
        "inline.toml:14:8: routes[0].limits[0].cost: must be between 1 and 100 (the limit, or its burst when smaller), got 101 (a larger reservation could never be allowed)"
    );
    // a gcra limit takes at most its burst at once: a larger reservation would never pass
    assert_eq!(
        refused(&format!("{limit}algorithm = \"gcra\"\nburst = 10\ncost_from = \"json:n\"\ncost = 50\n")),
        "inline.toml:16:8: routes[0].limits[0].cost: must be between 1 and 10 (the limit, or its burst when smaller), got 50 (a larger reservation could never be allowed)"
    );
    assert_eq!(
        refused(&format!("{limit}cost_from = \"json:n\"\nreset_status = [200]\n")),
        "inline.toml:14:16: routes[0].limits[0].reset_status: cannot be used with cost_from (a reset forgives answered attempts, and this limit counts what they cost)"
    );
    assert_eq!(
        refused(&format!("{limit}cost_from = \"sse:n\"\ncost = \"json:max_tokens\"\n[[routes.limits]]\nname = \"daily\"\nlimit = 900\nwindow = \"1d\"\ncost_from = \"sse:n\"\ncost = 2\n")),
        "inline.toml:20:8: routes[0].limits[1].cost: the limits with cost_from of one route reserve one amount per attempt, but `daily` reserves 2 and `tokens` reserves json:max_tokens"
    );
}

#[test]
fn settings_nothing_reads_are_warned_about() {
    let lease = format!(
        "{HEAD}[[routes.limits]]\nname = \"m\"\nlimit = 4\nwindow = \"1m\"\nlease = \"1m\"\n"
    );
    assert_eq!(
        warnings(&lease),
        ["routes[0].limits[0].lease is ignored: only algorithm = \"concurrency\" takes a lease"]
    );
    let bytes = format!("{HEAD}max_cost_body_bytes = 10\n[[routes.limits]]\nname = \"m\"\nlimit = 4\nwindow = \"1m\"\ncost_from = \"header:x-n\"\n");
    assert_eq!(
        warnings(&bytes),
        ["routes[0].max_cost_body_bytes is ignored: no limit of the route reads its cost from the body (cost_from = \"json:...\" or \"sse:...\")"]
    );
    let forward = "[forward_auth]\nlisten = \"127.0.0.1:0\"\n[[routes]]\nname = \"chat\"\npath = \"/v1/*\"\n[[routes.limits]]\nname = \"inflight\"\nlimit = 4\nalgorithm = \"concurrency\"\n";
    assert_eq!(
        warnings(forward),
        ["routes[0] `chat` limits attempts in flight (algorithm = \"concurrency\"): forward auth never sees the answer, so through it an attempt's slot is freed once the proxy's question is answered, before the attempt itself ends, so it bounds only the questions in flight; the proxy listener or the tower layer sees it"]
    );
}

/// A plans file that is refused is named with the line and column of what is wrong in it, as
/// the config file is: a line that is not TOML, and a plan that is not a string.
#[test]
fn a_plans_file_error_points_into_the_plans_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[upstreams.app]\nurl = \"http://127.0.0.1:9000\"\n\n[plans]\nmembers_file = \"plans.toml\"\n",
    )
    .unwrap();
    let plans = dir.path().join("plans.toml");
    let shown = plans.display().to_string();
    for (text, at, says) in [
        (
            "\"k1\" = \"gold\"\n\"k2\" = gold\n",
            "2:8",
            "not a plans file",
        ),
        (
            "\"k1\" = \"gold\"\n\"k2\" = 5\n",
            "2:8",
            "the plan of `k2` must be a string",
        ),
    ] {
        std::fs::write(&plans, text).unwrap();
        let err = slidegate::config::Config::load_with_env(&config, |_: &str| None).unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with(&format!("{shown}:{at}: ")), "{message}");
        assert!(message.contains(says), "{message}");
    }
}

/// A cost read from the answer on a `sliding_log` limit above 1,000 is warned about: one
/// answer may write that many entries in one script call. At 1,000, or on the counter, not.
#[test]
fn a_large_sliding_log_limit_with_cost_from_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let warned = |limit: u64, algorithm: &str| {
        let text = format!(
            "[upstreams.app]\nurl = \"http://127.0.0.1:9000\"\n\n[[routes]]\nname = \"chat\"\npath = \"/v1/*\"\nupstream = \"app\"\n  [[routes.limits]]\n  name = \"tokens\"\n  limit = {limit}\n  window = \"1h\"\n  algorithm = \"{algorithm}\"\n  cost_from = \"header:x-usage\"\n"
        );
        std::fs::write(&config, text).unwrap();
        let loaded = slidegate::config::Config::load_with_env(&config, |_: &str| None).unwrap();
        loaded
            .warnings
            .iter()
            .any(|w| w.to_string().contains("keeps one entry per unit"))
    };
    assert!(warned(5_000, "sliding_log"));
    assert!(!warned(1_000, "sliding_log"));
    assert!(!warned(5_000, "sliding_window_counter"));
}
