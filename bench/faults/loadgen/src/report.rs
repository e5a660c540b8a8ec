//! The `report` command: one fault's chart and figures, printed (and appended to `--chart-out`
//! if given), and its row appended to the Markdown table `--row-out`.

mod chart;
mod figures;
mod metrics;
mod records;
mod store;

use std::fmt::Write as _;
use std::io::Write;

use crate::{die, Opts};
use figures::Figures;
use records::Run;
use store::Lost;

/// The `report` command.
pub fn report(opts: &Opts) {
    let dir = opts.req("dir");
    let fault = opts.req("fault");
    let title = opts.get("title").unwrap_or(fault);
    let run = Run::read(dir, opts);
    let peak = opts.get("peak").and_then(|p| p.parse::<f64>().ok());
    let mut out = chart::section(&run, fault, title, peak);
    let figures = Figures::of(&run);
    let lost = opts
        .get("zcard")
        .map_or_else(Lost::unknown, |z| store::lost(z, dir, &run));
    let metrics = opts.get("metrics").map_or(String::new(), metrics::summary);
    let note = opts.get("note").unwrap_or("");
    let skipped = records::skipped(dir);
    out.push_str(&figure_list(&figures, &lost, &metrics, skipped, note));
    print!("{out}");
    if let Some(chart_out) = opts.get("chart-out") {
        append(chart_out, &out);
    }
    let row = markdown_row(fault, &run, &figures, &lost, note);
    append(opts.req("row-out"), &row);
}

/// The list under the chart: the figures, then whatever else happened, one item a line.
fn figure_list(f: &Figures, lost: &Lost, metrics: &str, skipped: u64, note: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "- store (or upstream) back after: {} (fault to the moment it answered again)",
        f.outage
    );
    let _ = writeln!(out, "- first request decided correctly after that: {}; recovered after it (the first whole second in which every request was decided correctly starts): {} (goal: within 2 s)", f.first_good, f.settle);
    if !f.outage_shares.is_empty() {
        let shares: Vec<String> = f
            .outage_shares
            .iter()
            .map(|s| format!("{:.0} %", s * 100.0))
            .collect();
        let _ = writeln!(
            out,
            "- decided by the store while it was down, per second from the fault: {} (lowest {})",
            shares.join(", "),
            lowest_share(f)
        );
    }
    let _ = writeln!(
        out,
        "- answered by on_error: {} fail-open 200 on `allow`, {} 503 on `deny`; 502/504: {}",
        f.open_allow, f.denied_deny, f.upstream
    );
    let _ = writeln!(
        out,
        "- unexplained by on_error (goal 0): {}{}",
        f.unexplained,
        if f.breakdown.is_empty() {
            String::new()
        } else {
            format!(" ({})", f.breakdown.join(", "))
        }
    );
    let _ = writeln!(
        out,
        "- dropped connections (connect errors, resets, client timeouts of 5 s; goal 0): {}",
        f.dropped
    );
    let _ = writeln!(
        out,
        "- slowest answer: {:.0} ms; answers slower than 1 s: {}",
        f.slowest, f.over_1s
    );
    if f.later_bad > 0 {
        let _ = writeln!(out, "- after that, {} request(s) were answered by on_error again (store.timeout under load)", f.later_bad);
    }
    if skipped > 0 {
        let _ = writeln!(out, "- {skipped} request(s) of the schedule not sent: their connection was more than 100 ms behind (a slow answer, or the machine busy)");
    }
    if f.before_fault_bad > 0 {
        let _ = writeln!(out, "- before the fault, {} request(s) were not decided by the store (store.timeout under load)", f.before_fault_bad);
    }
    if !lost.detail.is_empty() {
        let _ = writeln!(out, "- {}", lost.detail);
    }
    if !metrics.is_empty() {
        let _ = writeln!(out, "- gateway /metrics after the run: {metrics}");
    }
    if !note.is_empty() {
        let _ = writeln!(out, "- {note}");
    }
    let _ = writeln!(out);
    out
}

/// The fault's row of the Markdown table of `bench/faults/README.md`.
fn markdown_row(fault: &str, run: &Run, f: &Figures, lost: &Lost, note: &str) -> String {
    format!(
        "| {fault} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {} | {} |\n",
        thousands(run.rate),
        thousands(run.requests.len() as f64),
        f.outage,
        lowest_share(f),
        f.first_good,
        f.settle,
        f.open_allow,
        f.denied_deny,
        f.upstream,
        f.unexplained,
        f.dropped,
        f.slowest,
        lost.text,
        if note.is_empty() { "-" } else { note }
    )
}

/// The lowest share of requests decided by the store in a second of the outage (`-` when
/// the run has no outage).
fn lowest_share(f: &Figures) -> String {
    f.outage_shares
        .iter()
        .copied()
        .reduce(f64::min)
        .map_or("-".into(), |s| format!("{:.0} %", s * 100.0))
}

/// Appends `text` to the file `path` (created if need be); dies when it cannot be opened.
fn append(path: &str, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| die(&format!("{path}: {e}")));
    f.write_all(text.as_bytes()).expect("written");
}

/// `v` rounded, with commas between thousands: `12,345`.
fn thousands(v: f64) -> String {
    let s = format!("{:.0}", v);
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}
