//! The printed report: a Markdown table of every measure, then PASS/FAIL lines.

use crate::measure::Report;
use crate::settings::Settings;

fn percent(x: f64) -> String {
    format!("{:.4} %", 100.0 * x)
}

pub fn print_table(s: &Settings, r: &Report) {
    let d = &r.decisions;
    let share = |n: u64| format!("{} ({n})", percent(n as f64 / d.requests as f64));
    let rows = [
        (
            "requests (keys, windows)".to_string(),
            format!(
                "{} ({}, {} of {} s)",
                d.requests, s.keys, s.windows, s.window_secs
            ),
        ),
        ("limit per window".into(), s.limit.to_string()),
        (
            "allowed by the log / by the counter".into(),
            format!("{} / {}", d.allowed_by_log, d.allowed_by_counter),
        ),
        (
            "wrong decisions (counter vs log)".into(),
            share(d.false_allows + d.false_denies),
        ),
        (
            "false allows (counter allows, log denies)".into(),
            share(d.false_allows),
        ),
        (
            "false denies (counter denies, log allows)".into(),
            share(d.false_denies),
        ),
        (
            "keys denied at least once by the log / by the counter".into(),
            format!("{} / {}", r.keys.by_log, r.keys.by_counter),
        ),
        (
            "keys denied by the counter, never by the log".into(),
            r.keys.by_counter_only.to_string(),
        ),
        (
            "keys denied by the log, never by the counter".into(),
            r.keys.by_log_only.to_string(),
        ),
        (
            "mean rate error (admitted per key and window, counter vs log)".into(),
            percent(r.rate_error),
        ),
        (
            "(key, window) pairs admitted by the counter only".into(),
            r.counter_only_windows.to_string(),
        ),
        (
            "mean estimate error (counter's estimate vs its real count)".into(),
            percent(r.estimate_error),
        ),
        (
            "max over-admission, any window (t - w, t], counter".into(),
            percent(r.counter_worst),
        ),
        (
            "keys over-admitted by more than 10 % in some window, counter".into(),
            percent(r.counter_keys_above),
        ),
        (
            "max over-admission, the counter's fixed windows".into(),
            percent(r.counter_fixed),
        ),
        (
            "max over-admission, any window, log (must be 0)".into(),
            percent(r.log_worst),
        ),
        (
            format!(
                "Redis bytes per key, sliding_log (MEMORY USAGE, {} keys)",
                r.log_bytes.1
            ),
            format!("{:.0}", r.log_bytes.0),
        ),
        (
            format!(
                "Redis bytes per key, sliding_window_counter ({} keys)",
                r.counter_bytes.1
            ),
            format!("{:.0}", r.counter_bytes.0),
        ),
        (
            "replay time, both algorithms at once".into(),
            format!("{:.1} s", r.replay_secs),
        ),
    ];
    println!("| measure | value |");
    println!("| --- | --- |");
    for (measure, value) in rows {
        println!("| {measure} | {value} |");
    }
}

pub fn print_verdicts(r: &Report) {
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    let lines = [
        (
            r.counter_worst <= 0.10,
            "the counter admits at most 10 % above the limit in any window",
            r.counter_worst,
        ),
        (
            r.counter_fixed <= 0.10,
            "the counter admits at most 10 % above the limit in its fixed windows",
            r.counter_fixed,
        ),
        (
            r.log_worst == 0.0,
            "the log never admits above the limit",
            r.log_worst,
        ),
    ];
    println!();
    for (ok, what, worst) in lines {
        println!("{}: {what} (worst {})", verdict(ok), percent(worst));
    }
}
