//! The gateway's `/metrics` after the run (`--metrics`): its requests by route and decision and
//! its store errors by kind, in one line.

use std::collections::HashMap;

use super::records::read_lines;

/// The non-zero totals of the file `path`, sorted by name: `ROUTE:DECISION=N` for
/// `slidegate_requests_total`, `store_errors:KIND=N` for `slidegate_store_errors_total`.
pub fn summary(path: &str) -> String {
    let mut by: HashMap<String, f64> = HashMap::new();
    for line in read_lines(path) {
        if let Some((name, value)) = series(&line) {
            *by.entry(name).or_default() += value;
        }
    }
    let mut names: Vec<_> = by.into_iter().filter(|(_, v)| *v > 0.0).collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    names
        .iter()
        .map(|(k, v)| format!("{k}={v:.0}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The name and value of a sample line of either counter (none for any other line).
fn series(line: &str) -> Option<(String, f64)> {
    let decision = label(line, "decision");
    let (Some(rest), true) = (
        line.strip_prefix("slidegate_requests_total{")
            .or_else(|| line.strip_prefix("slidegate_store_errors_total{")),
        !line.starts_with('#'),
    ) else {
        return None;
    };
    let value: f64 = rest
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let name = if line.starts_with("slidegate_requests_total") {
        format!(
            "{}:{}",
            label(line, "route").unwrap_or("?"),
            decision.unwrap_or("?")
        )
    } else {
        format!("store_errors:{}", label(line, "kind").unwrap_or("?"))
    };
    Some((name, value))
}

/// A label's value in a Prometheus text line.
fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let at = line.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = &line[at..];
    Some(&rest[..rest.find('"')?])
}
