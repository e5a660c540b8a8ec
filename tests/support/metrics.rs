//! Reading the Prometheus text format: one series' value by name and labels.

/// The value of series `name` whose labels include every one of `labels`; `None` when there is
/// no such series. Fails the test when more than one series matches.
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (series_name, series_labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let has_all = labels.iter().all(|(k, v)| {
                series_labels
                    .split(',')
                    .any(|kv| kv == format!("{k}=\"{v}\""))
            });
            (series_name == name && has_all).then(|| value.parse().unwrap())
        })
        .collect();
    assert!(
        matching.len() <= 1,
        "{name} {labels:?} matches {} series",
        matching.len()
    );
    matching.first().copied()
}
