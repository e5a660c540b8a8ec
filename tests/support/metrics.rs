//! Reading the Prometheus text format: the values of the series of one name whose labels include
//! given pairs, as one value or as a sum.

/// The values of every series of `name` whose labels include all of `labels`.
pub fn series<'a>(
    text: &'a str,
    name: &'a str,
    labels: &'a [(&'a str, &'a str)],
) -> impl Iterator<Item = f64> + 'a {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(move |line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, series_labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let has = |k: &str, v: &str| {
                series_labels
                    .split(',')
                    .any(|pair| pair == format!("{k}=\"{v}\""))
            };
            (series_name == name && labels.iter().all(|(k, v)| has(k, v)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
}

/// The value of series `name` whose labels include every one of `labels`; `None` when there is
/// no such series. Fails the test when more than one series matches.
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = series(text, name, labels).collect();
    assert!(
        matching.len() <= 1,
        "{name} {labels:?} matches {} series",
        matching.len()
    );
    matching.first().copied()
}
