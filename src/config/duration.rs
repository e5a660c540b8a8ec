//! The config's duration syntax: a whole number and a unit, `250ms`, `1s`, `5m`, `1h`, `1d`,
//! `7d`, or several such run together, largest unit first and each once (`1h30m`, summed).
//! Nothing else: no spaces, fractions, months or years, so that `1M` (a minute or a month?),
//! `1.5s` or `1h1h` is an error to fix rather than a guess. [`format`] writes a duration back in the same syntax, so what `check`,
//! `/admin/config` and error messages show can be pasted into a file.

use std::time::Duration;

/// The units, longest name first where one is a prefix of another (`ms` before `m`).
const UNITS: [(&str, Duration); 5] = [
    ("ms", Duration::from_millis(1)),
    ("s", Duration::from_secs(1)),
    ("m", Duration::from_secs(60)),
    ("h", Duration::from_secs(3_600)),
    ("d", Duration::from_secs(86_400)),
];

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a sequence of number-unit pairs.
    #[error("a duration is a whole number and a unit (ms, s, m, h, d)")]
    Syntax,
    /// A unit that is not one of ours (`min`, `M`, `y`, ...).
    #[error("`{0}` is not a unit (ms, s, m, h, d)")]
    Unit(String),
    /// A unit written again, or after a smaller one (`1h1h`, `30m1h`): likely a typo.
    #[error("units run together go from the largest to the smallest, each once (`1h30m`)")]
    Order,
    /// Beyond what a duration holds.
    #[error("too long")]
    Overflow,
}

/// Parses `text` as the config writes durations.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let mut rest = text;
    let mut total = Duration::ZERO;
    let mut smallest_yet = Duration::MAX;
    if rest.is_empty() {
        return Err(DurationError::Syntax);
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let letters = rest[digits..]
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        if digits == 0 || letters == 0 {
            return Err(DurationError::Syntax);
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| DurationError::Overflow)?;
        let unit = &rest[digits..digits + letters];
        let (_, length) = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .ok_or_else(|| DurationError::Unit(unit.to_string()))?;
        if *length >= smallest_yet {
            return Err(DurationError::Order);
        }
        smallest_yet = *length;
        // Every unit is whole milliseconds: `31622400000ms` is `366d`.
        total = (length.as_millis() as u64)
            .checked_mul(number)
            .and_then(|ms| total.checked_add(Duration::from_millis(ms)))
            .ok_or(DurationError::Overflow)?;
        rest = &rest[digits + letters..];
    }
    Ok(total)
}

/// `d` in the config's syntax, largest units first (`1h30m`, `1s500ms`, `7d`); `0s` for zero.
/// Below a millisecond (which a config cannot write) it is rounded down.
pub fn format(d: Duration) -> String {
    let mut ms = d.as_millis();
    if ms == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    for (name, length) in UNITS.iter().rev() {
        let unit = length.as_millis();
        if ms >= unit {
            out.push_str(&format!("{}{name}", ms / unit));
            ms %= unit;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_forms_and_their_sums() {
        let ok = |t: &str| parse(t).unwrap_or_else(|e| panic!("{t}: {e}"));
        assert_eq!(ok("250ms"), Duration::from_millis(250));
        assert_eq!(ok("1s"), Duration::from_secs(1));
        assert_eq!(ok("5m"), Duration::from_secs(300));
        assert_eq!(ok("1h"), Duration::from_secs(3_600));
        assert_eq!(ok("7d"), Duration::from_secs(7 * 86_400));
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok("1h30m"), Duration::from_secs(5_400));
        assert_eq!(ok("2s500ms"), Duration::from_millis(2_500));
        assert_eq!(ok("31622400000ms"), Duration::from_secs(366 * 86_400));
        assert_eq!(ok("5000000000s"), Duration::from_secs(5_000_000_000));
        assert_eq!(
            parse("99999999999999999999ms"),
            Err(DurationError::Overflow)
        );
    }

    #[test]
    fn formats_parse_back_to_the_same_duration() {
        for (d, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(50), "50ms"),
            (Duration::from_millis(1_500), "1s500ms"),
            (Duration::from_secs(5_400), "1h30m"),
            (Duration::from_secs(86_400), "1d"),
            (Duration::from_secs(366 * 86_400), "366d"),
        ] {
            assert_eq!(format(d), text);
            assert_eq!(parse(text), Ok(d));
        }
    }

    #[test]
    fn anything_else_is_refused() {
        for text in [
            "",
            " 1m",
            "1m ",
            "5 minutes",
            "1.5s",
            "1M",
            "1y",
            "1min",
            "ms",
            "1",
            "-1s",
        ] {
            assert!(parse(text).is_err(), "{text:?} was accepted");
        }
        assert_eq!(parse("1M"), Err(DurationError::Unit("M".into())));
        assert_eq!(parse("999999999999d"), Err(DurationError::Overflow));
    }

    #[test]
    fn units_run_together_go_down_each_once() {
        for text in ["1h1h", "1s1h", "1ms1m", "30m1h", "1s500ms500ms"] {
            assert_eq!(parse(text), Err(DurationError::Order), "{text:?}");
        }
        assert_eq!(parse("1d2h3m4s5ms"), Ok(Duration::from_millis(93_784_005)));
    }
}
