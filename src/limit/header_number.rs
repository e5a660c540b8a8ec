//! A number as a header value without an allocation when it is small: the rate-limit headers
//! and `Retry-After` carry a limit, what remains of it and seconds to wait on every answer of a
//! limited route, and a 429 from the deny cache carries four of them. Below [`TABLED`], the value
//! points into a static table of decimal digits; a larger number is written into a value of its
//! own.

use bytes::Bytes;
use http::HeaderValue;

/// Numbers below this come from the table.
const TABLED: usize = 10_000;
/// Digits per entry: enough for `TABLED - 1`.
const WIDTH: usize = 4;

/// The decimal digits of every number below [`TABLED`], zero-padded to [`WIDTH`] (40 KB).
static DIGITS: [[u8; WIDTH]; TABLED] = digits();

const fn digits() -> [[u8; WIDTH]; TABLED] {
    let mut table = [[b'0'; WIDTH]; TABLED];
    let mut n = 0;
    while n < TABLED {
        let mut rest = n;
        let mut at = WIDTH;
        while rest > 0 {
            at -= 1;
            table[n][at] = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        n += 1;
    }
    table
}

/// `n` in decimal, as a header value.
pub fn number_value(n: u64) -> HeaderValue {
    match usize::try_from(n) {
        Ok(small) if small < TABLED => {
            let digits = &DIGITS[small][WIDTH - decimal_len(small)..];
            HeaderValue::from_maybe_shared(Bytes::from_static(digits))
                .expect("decimal digits are a header value")
        }
        _ => HeaderValue::from(n),
    }
}

/// How many decimal digits `n` (below [`TABLED`]) has.
fn decimal_len(n: usize) -> usize {
    match n {
        0..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_reads_as_its_decimal_digits() {
        let edges = [
            0, 1, 9, 10, 99, 100, 999, 1_000, 9_999, 10_000, 10_001, 3_600,
        ];
        let all_tabled = 0..TABLED as u64;
        for n in all_tabled.chain(edges).chain([u64::MAX, 1 << 53]) {
            assert_eq!(number_value(n).to_str().unwrap(), n.to_string(), "{n}");
        }
    }

    #[test]
    fn a_small_number_points_into_the_table() {
        let start = DIGITS.as_ptr().cast::<u8>();
        let table = start..start.wrapping_add(TABLED * WIDTH);
        for n in [0, 7, 429, 3_600, 9_999] {
            assert!(table.contains(&number_value(n).as_bytes().as_ptr()), "{n}");
        }
        assert!(!table.contains(&number_value(10_000).as_bytes().as_ptr()));
    }
}
