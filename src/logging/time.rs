//! The time at the head of a log line, as `tracing-subscriber`'s default timer writes it (RFC
//! 3339 in UTC with microseconds: `2026-11-30T22:25:58.217883Z`), with the date and the time of
//! day worked out once a second on each thread instead of once a line.

use std::cell::Cell;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

/// The log lines' timer (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct LineTime;

/// `YYYY-MM-DDTHH:MM:SS`: the part of a time that changes once a second.
type Second = [u8; 19];

thread_local! {
    /// The last second this thread wrote, and its text.
    static LAST_SECOND: Cell<(u64, Second)> = const { Cell::new((u64::MAX, [0; 19])) };
}

impl FormatTime for LineTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let Ok(since_epoch) = SystemTime::now().duration_since(UNIX_EPOCH) else {
            return tracing_subscriber::fmt::time::SystemTime.format_time(w);
        };
        let secs = since_epoch.as_secs();
        let (last, mut text) = LAST_SECOND.get();
        if last != secs {
            let Some(fresh) = second_text(secs) else {
                return tracing_subscriber::fmt::time::SystemTime.format_time(w);
            };
            text = fresh;
            LAST_SECOND.set((secs, text));
        }
        let mut fraction = *b".000000Z";
        let mut micros = since_epoch.subsec_micros();
        for digit in fraction[1..7].iter_mut().rev() {
            *digit = b'0' + (micros % 10) as u8;
            micros /= 10;
        }
        // Both are ASCII digits and separators.
        w.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)?;
        w.write_str(std::str::from_utf8(&fraction).map_err(|_| fmt::Error)?)
    }
}

/// The text of the second `secs` after the epoch, for years up to 9999 (the default timer
/// writes later years in another form, left to it).
fn second_text(secs: u64) -> Option<Second> {
    let (year, month, day) = civil_date(secs / 86_400);
    if year > 9999 {
        return None;
    }
    let of_day = secs % 86_400;
    let mut text = *b"0000-00-00T00:00:00";
    put_digits(&mut text[0..4], year);
    put_digits(&mut text[5..7], month);
    put_digits(&mut text[8..10], day);
    put_digits(&mut text[11..13], of_day / 3600);
    put_digits(&mut text[14..16], of_day / 60 % 60);
    put_digits(&mut text[17..19], of_day % 60);
    Some(text)
}

/// Writes `value`'s last `out.len()` decimal digits into `out`, zero-padded.
fn put_digits(out: &mut [u8], mut value: u64) {
    for digit in out.iter_mut().rev() {
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// The proleptic Gregorian (year, month, day) of a day counted from 1970-01-01 (the
/// days-from-civil inverse of Howard Hinnant's date algorithms).
fn civil_date(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(secs: u64) -> String {
        String::from_utf8(second_text(secs).unwrap().to_vec()).unwrap()
    }

    #[test]
    fn seconds_read_as_the_calendar_does() {
        assert_eq!(text(0), "1970-01-01T00:00:00");
        assert_eq!(text(951_782_400), "2000-02-29T00:00:00");
        assert_eq!(text(951_868_799), "2000-02-29T23:59:59");
        assert_eq!(text(4_107_542_400), "2100-03-01T00:00:00");
        assert_eq!(text(1_795_996_800 + 3_723), "2026-11-30T01:02:03");
        assert_eq!(text(253_402_300_799), "9999-12-31T23:59:59");
        assert!(second_text(253_402_300_800).is_none());
    }

    #[test]
    fn a_line_time_reads_as_the_default_timers() {
        let (mut ours, mut theirs) = (String::new(), String::new());
        // Taken in one second (retried at a second's turn).
        for _ in 0..3 {
            ours.clear();
            theirs.clear();
            LineTime.format_time(&mut Writer::new(&mut ours)).unwrap();
            tracing_subscriber::fmt::time::SystemTime
                .format_time(&mut Writer::new(&mut theirs))
                .unwrap();
            if ours[..19] == theirs[..19] {
                break;
            }
        }
        assert_eq!(ours.len(), theirs.len(), "{ours} {theirs}");
        assert_eq!(ours[..19], theirs[..19]);
        assert_eq!(&ours[19..20], ".");
        assert!(ours.ends_with('Z'));
    }
}
