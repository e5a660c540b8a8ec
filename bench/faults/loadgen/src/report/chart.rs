//! The report's first part: its heading, the load, and the chart of the requests by the second
//! they were sent (what they got, the slowest answer, the events of that second).

use std::fmt::Write as _;

use super::records::{Event, Run};
use super::thousands;

/// The chart's column heads and the legend of its bars.
const HEADER: &str = "   s  allowed  429  fail-open    503  502/504  other  dropped  max ms  # allowed  r 429  o fail-open 200  x 503  u 502/504  ? other  ! dropped";

/// What the columns mean, under the chart.
const LEGEND: &str = "(`allowed`: 200 carrying the store's rate-limit headers; `fail-open`: 200 without them (store_error_allowed); rows by the second the request was sent; `max ms`: its slowest answer)";

/// The requests sent in one second.
#[derive(Clone, Default)]
struct Second {
    /// How many got each outcome, by its number (`Outcome as usize`).
    counts: [u64; 9],
    /// The slowest of their answers, in ms.
    max_ms: f64,
}

/// The heading, the load and the chart, in Markdown.
pub fn section(run: &Run, fault: &str, title: &str, peak: Option<f64>) -> String {
    let seconds = per_second(run);
    let busiest = seconds
        .iter()
        .map(|s| s.counts.iter().sum::<u64>())
        .max()
        .unwrap_or(1)
        .max(1);
    let mut out = String::new();
    let _ = writeln!(out, "### {fault}: {title}");
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", load_line(run, peak));
    let _ = writeln!(out);
    let _ = writeln!(out, "```text");
    let _ = writeln!(out, "{HEADER}");
    for (s, second) in seconds.iter().enumerate() {
        let _ = writeln!(out, "{}", chart_row(s, second, busiest, &run.events));
    }
    let _ = writeln!(out, "```");
    let _ = writeln!(out, "{LEGEND}");
    let _ = writeln!(out);
    out
}

/// The requests per second of the run (the last second takes any sent after the end).
fn per_second(run: &Run) -> Vec<Second> {
    let n_secs = (run.seconds.ceil() as usize).max(1);
    let mut seconds = vec![Second::default(); n_secs];
    for r in &run.requests {
        let second = &mut seconds[((r.start_ms / 1000.0) as usize).min(n_secs - 1)];
        second.counts[r.outcome as usize] += 1;
        second.max_ms = second.max_ms.max(r.latency_ms);
    }
    seconds
}

/// The load asked for and sent (and, given `--peak`, what share of the gateway's peak it is).
fn load_line(run: &Run, peak: Option<f64>) -> String {
    format!(
        "load: {} req/s asked{}, {} requests over {} connections in {:.0} s, half to route `allow` (on_error = \"allow\"), half to `deny` (on_error = \"deny\")",
        thousands(run.rate),
        peak.map_or(String::new(), |p| format!(" (half of the {} req/s wrk peak)", thousands(p))),
        thousands(run.requests.len() as f64),
        run.conns,
        run.seconds
    )
}

/// The chart's line for second `s`: its counts, its bar (scaled to the `busiest` second) and
/// its events.
fn chart_row(s: usize, second: &Second, busiest: u64, events: &[Event]) -> String {
    let c = &second.counts;
    let dropped = c[6] + c[7] + c[8];
    let groups = [
        (c[0], '#'),
        (c[2], 'r'),
        (c[1], 'o'),
        (c[3], 'x'),
        (c[4], 'u'),
        (c[5], '?'),
        (dropped, '!'),
    ];
    let marks = marks(s, events);
    format!(
        "{:>4} {:>8} {:>4} {:>10} {:>6} {:>8} {:>6} {:>8} {:>7.0}  {:<40}{}",
        s,
        c[0],
        c[2],
        c[1],
        c[3],
        c[4],
        c[5],
        dropped,
        second.max_ms,
        bar(&groups, busiest, 40),
        if marks.is_empty() {
            String::new()
        } else {
            format!("  <- {}", marks.join("; "))
        }
    )
}

/// The events of second `s`, each with its time.
fn marks(s: usize, events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.at_ms >= s as f64 * 1000.0 && e.at_ms < (s + 1) as f64 * 1000.0)
        .map(|e| format!("{:.2} s {}", e.at_ms / 1000.0, e.text))
        .collect()
}

/// A bar of `width` characters at most for `total`, each group's share in its character
/// (every non-empty group gets at least one).
fn bar(groups: &[(u64, char)], total: u64, width: usize) -> String {
    let mut out = String::new();
    for &(n, ch) in groups {
        if n == 0 {
            continue;
        }
        let len = ((n as f64 / total as f64) * width as f64).round().max(1.0) as usize;
        out.extend(std::iter::repeat_n(ch, len));
    }
    out.chars().take(width).collect()
}
