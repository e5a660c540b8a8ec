//! `normalize = "phone"`: a phone number in E.164, read exactly as libphonenumber reads it with
//! the route's region, or refused. The steps are libphonenumber's own (`parse`: the `+` or the
//! region's international dialling prefix, the country code, the national prefix, the length
//! and type checks) over the metadata the `phonenumber` crate ships; the crate's own parser is
//! then asked to read the same spelling, and a value the two read differently is refused.
//!
//! Differences from calling `phonenumber::parse`: the crate reads a space-free `+8190-1234-2527`
//! as country code 8190, takes any leading `00` for a dialling-out prefix only where the region
//! says so but strips national prefixes with the region's rules from foreign numbers (so it is
//! asked about a number after the region's dialling-out prefix as `+` and the rest), and
//! matches number patterns by prefix; libphonenumber does none of these. And what
//! libphonenumber itself reads loosely is refused here: any letter (it maps three or more to
//! keypad digits and drops fewer), an extension, a `+` after a digit, any character but
//! digits and the punctuation it skips (its tildes, which it reads as more than punctuation,
//! are refused too); what it drops around the number (junk before the first digit or `+` and
//! after the last digit, a run of `+`) is dropped here too ([`super::phone_spelling`]).

use std::collections::HashMap;
use std::sync::OnceLock;

use phonenumber::country::Id;
use phonenumber::metadata::{Descriptor, Metadata, DATABASE};
use regex::Regex;

use super::phone_spelling::screen;

/// libphonenumber's bounds: the shortest and longest national significant number, the
/// longest country code.
const MIN_NSN: usize = 2;
const MAX_NSN: usize = 17;
const MAX_CC: usize = 3;

/// The number in E.164 (`+6281234567890`), or `None` when it is not a valid number, or not one
/// libphonenumber and the crate read alike.
pub fn normalize_phone(text: &str, region: Option<Id>) -> Option<String> {
    let (plus, digits) = screen(text)?;
    let default = match region {
        Some(id) => Some(DATABASE.by_id(id.as_ref())?),
        None => None,
    };
    let (cc, national) = country_code(plus, &digits, default)?;
    let meta = match cc {
        Some(cc) => main_metadata(cc)?,
        None => default?,
    };
    let cc = meta.country_code();
    let national = without_national_prefix(national, meta);
    if !(MIN_NSN..=MAX_NSN).contains(&national.len()) || !is_valid(cc, &national) {
        return None;
    }
    // the crate must read the spelling alike: a number after a `+` or the region's dialling-out
    // prefix as `+` and the rest (it strips the region's national prefix from foreign numbers)
    let idd = (!plus || extract_cc(&digits).is_none()).then(|| strip_idd(default?, &digits));
    let (crate_region, cleaned) = match idd.flatten() {
        Some(rest) => (None, format!("+{rest}")),
        None if plus => (None, format!("+{digits}")),
        None => (region, digits),
    };
    let theirs = phonenumber::parse(crate_region, &cleaned).ok()?;
    let zeros = "0".repeat(theirs.national().zeros() as usize);
    let agrees = theirs.code().value() == cc
        && format!("{zeros}{}", theirs.national().value()) == national
        && theirs.is_valid();
    agrees.then(|| format!("+{cc}{national}"))
}

/// libphonenumber's `maybeExtractCountryCode`: the country code the spelling gives (after a
/// `+`, or after the region's own international prefix, or written before a national number
/// of the region) and the digits after it; `Some((None, digits))` when the number is national
/// (the region's country). `None`: no country can be read.
fn country_code(
    plus: bool,
    digits: &str,
    default: Option<&Metadata>,
) -> Option<(Option<u16>, String)> {
    if plus {
        if digits.len() <= MIN_NSN {
            return None;
        }
        if let Some((cc, rest)) = extract_cc(digits) {
            return Some((Some(cc), rest.to_string()));
        }
        // `+00 ...`: libphonenumber drops the `+` and reads the region's prefix after it
        let rest = strip_idd(default?, digits)?;
        return extract_cc_after_idd(rest);
    }
    let default = default?;
    if let Some(rest) = strip_idd(default, digits) {
        return extract_cc_after_idd(rest);
    }
    Some(match country_code_in_number(default, digits) {
        Some(national) => (Some(default.country_code()), national),
        None => (None, digits.to_string()),
    })
}

fn extract_cc_after_idd(rest: &str) -> Option<(Option<u16>, String)> {
    if rest.len() <= MIN_NSN {
        return None;
    }
    let (cc, national) = extract_cc(rest)?;
    Some((Some(cc), national.to_string()))
}

/// The first 1 to 3 digits that are a known country code (none starts with `0`).
fn extract_cc(digits: &str) -> Option<(u16, &str)> {
    if digits.starts_with('0') {
        return None;
    }
    (1..=MAX_CC.min(digits.len())).find_map(|n| {
        let cc: u16 = digits[..n].parse().ok()?;
        DATABASE.by_code(&cc).map(|_| (cc, &digits[n..]))
    })
}

/// The digits after the region's international dialling prefix, where they start with it and
/// the digit after it is not `0` (libphonenumber's `parsePrefixAsIdd`).
fn strip_idd<'d>(meta: &Metadata, digits: &'d str) -> Option<&'d str> {
    let found = meta.international_prefix()?.find(digits)?;
    if found.start() != 0 {
        return None;
    }
    let rest = &digits[found.end()..];
    (!rest.starts_with('0')).then_some(rest)
}

/// A number of the region written with its country code but no `+` (`6281234567890` in ID):
/// the national number when libphonenumber takes the leading digits for the country code (the
/// whole does not match the region's numbers but the rest does, or the whole is too long).
fn country_code_in_number(meta: &Metadata, digits: &str) -> Option<String> {
    let rest = digits.strip_prefix(meta.country_code().to_string().as_str())?;
    let potential = strip_national_prefix(rest, meta).unwrap_or_else(|| rest.to_string());
    let better = !full_match(meta, digits) && full_match(meta, &potential);
    (better || length(meta, digits) == Length::TooLong).then_some(potential)
}

/// libphonenumber's `maybeStripNationalPrefixAndCarrierCode` (the carrier code dropped), kept
/// only when what is left still has a possible length for the region.
fn without_national_prefix(national: String, meta: &Metadata) -> String {
    let stripped = strip_national_prefix(&national, meta);
    match stripped {
        Some(s) if matches!(length(meta, &s), Length::Possible | Length::TooLong) => s,
        _ => national,
    }
}

/// The number without its national prefix (and carrier code), transformed where the region's
/// rule says so; `None` when nothing is to be stripped.
fn strip_national_prefix(number: &str, meta: &Metadata) -> Option<String> {
    let pattern = meta.national_prefix_for_parsing();
    let captures = match pattern {
        Some(p) => p.captures(number)?,
        None => return plain_national_prefix(number, meta),
    };
    let whole = captures.get(0)?;
    if whole.start() != 0 || number.is_empty() {
        return None;
    }
    let viable = full_match(meta, number);
    let groups = captures.len() - 1;
    let last_group = captures.get(groups);
    match meta.national_prefix_transform_rule() {
        Some(rule) if !rule.is_empty() && last_group.is_some() => {
            let transformed = java_replace(rule, &captures) + &number[whole.end()..];
            (!viable || full_match(meta, &transformed)).then_some(transformed)
        }
        _ => {
            let rest = &number[whole.end()..];
            (!viable || full_match(meta, rest)).then(|| rest.to_string())
        }
    }
}

/// A region with a national prefix and no pattern for it: the prefix itself is the pattern.
fn plain_national_prefix(number: &str, meta: &Metadata) -> Option<String> {
    let prefix = meta.national_prefix().filter(|p| !p.is_empty())?;
    let rest = number.strip_prefix(prefix)?;
    (!full_match(meta, number) || full_match(meta, rest)).then(|| rest.to_string())
}

/// A transform rule (`$1`, `9$1`) with its groups filled in, as Java's `replaceFirst` does for
/// the match at the start.
fn java_replace(rule: &str, captures: &regex::Captures<'_>) -> String {
    let mut out = String::new();
    let mut chars = rule.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek().and_then(|d| d.to_digit(10))) {
            ('$', Some(g)) => {
                chars.next();
                out.push_str(captures.get(g as usize).map_or("", |m| m.as_str()));
            }
            _ => out.push(c),
        }
    }
    out
}

/// libphonenumber's `testNumberLength` for any type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Length {
    Possible,
    LocalOnly,
    TooShort,
    TooLong,
    Invalid,
}

fn length(meta: &Metadata, number: &str) -> Length {
    let Some(region) = compiled(meta) else {
        return Length::Invalid;
    };
    let possible = &region.lengths;
    let n = number.len() as u16;
    let (Some(&min), Some(&max)) = (possible.first(), possible.last()) else {
        return Length::Invalid;
    };
    if region.local_lengths.contains(&n) {
        Length::LocalOnly
    } else if possible.contains(&n) {
        Length::Possible
    } else if n < min {
        Length::TooShort
    } else if n > max {
        Length::TooLong
    } else {
        Length::Invalid
    }
}

/// libphonenumber's `isValidNumber`: the number's region (the one of its country code whose
/// leading digits or number types take it), and a type of that region that matches it whole.
fn is_valid(cc: u16, national: &str) -> bool {
    let Some(metas) = DATABASE.by_code(&cc) else {
        return false;
    };
    let region = if metas.len() == 1 {
        Some(metas[0])
    } else {
        metas.into_iter().find(|meta| match meta.leading_digits() {
            Some(leading) => leading.find(national).is_some_and(|m| m.start() == 0),
            None => has_type(meta, national),
        })
    };
    region.is_some_and(|meta| has_type(meta, national))
}

/// Whether the number is of some type of the region (libphonenumber's `getNumberTypeHelper`
/// is not `UNKNOWN`): the general pattern and a type's possible length and pattern match it.
fn has_type(meta: &Metadata, national: &str) -> bool {
    let Some(region) = compiled(meta) else {
        return false;
    };
    let n = national.len() as u16;
    region.lengths.contains(&n)
        && region.general.is_match(national)
        && (region.types.iter()).any(|(lengths, pattern)| {
            (lengths.is_empty() || lengths.contains(&n)) && pattern.is_match(national)
        })
}

/// Whether the region's general pattern matches the whole of `number` (Java's `matches`; the
/// crate's own check accepts a match of its beginning).
fn full_match(meta: &Metadata, number: &str) -> bool {
    compiled(meta).is_some_and(|region| region.general.is_match(number))
}

/// What a region's metadata says once libphonenumber's build has read it: its patterns
/// anchored at both ends, and the possible lengths of its numbers (the union of its types'
/// lengths, which the raw metadata leaves out of the general description).
struct Compiled {
    general: Regex,
    lengths: Vec<u16>,
    local_lengths: Vec<u16>,
    /// Per type of number: its possible lengths and its pattern.
    types: Vec<(Vec<u16>, Regex)>,
}

/// The region's [`Compiled`] data, made on its first use (the table of regions is made once,
/// keyed by where each region's metadata lives, each entry filled once: no lock and no
/// allocation on the way).
fn compiled(meta: &Metadata) -> Option<&'static Compiled> {
    type Table = HashMap<usize, OnceLock<Option<Compiled>>>;
    static TABLE: OnceLock<Table> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = Table::new();
        for cc in 1..1000u16 {
            for meta in DATABASE.by_code(&cc).into_iter().flatten() {
                table.insert(std::ptr::from_ref(meta) as usize, OnceLock::new());
            }
        }
        table
    });
    let cell = table.get(&(std::ptr::from_ref(meta) as usize))?;
    cell.get_or_init(|| compile(meta)).as_ref()
}

fn compile(meta: &Metadata) -> Option<Compiled> {
    let d = meta.descriptors();
    let whole = |desc: &Descriptor| {
        regex::RegexBuilder::new(&format!("^(?:{})$", desc.national_number().as_str()))
            .ignore_whitespace(true)
            .build()
            .ok()
    };
    let typed = [
        d.premium_rate(),
        d.toll_free(),
        d.shared_cost(),
        d.voip(),
        d.personal_number(),
        d.pager(),
        d.uan(),
        d.voicemail(),
        d.fixed_line(),
        d.mobile(),
    ];
    let mut lengths: Vec<u16> = Vec::new();
    let mut local_lengths: Vec<u16> = Vec::new();
    let mut types = Vec::new();
    for desc in typed.into_iter().flatten() {
        lengths.extend(desc.possible_length());
        local_lengths.extend(desc.possible_local_length());
        types.push((desc.possible_length().to_vec(), whole(desc)?));
    }
    lengths.sort_unstable();
    lengths.dedup();
    local_lengths.sort_unstable();
    local_lengths.dedup();
    local_lengths.retain(|n| !lengths.contains(n));
    Some(Compiled {
        general: whole(d.general())?,
        lengths,
        local_lengths,
        types,
    })
}

/// The metadata of a country code's main region (the one libphonenumber reads its numbers by).
fn main_metadata(cc: u16) -> Option<&'static Metadata> {
    let metas = DATABASE.by_code(&cc)?;
    let main = metas.iter().find(|m| m.is_main_country_for_code());
    main.or(metas.first()).copied()
}

#[cfg(test)]
#[path = "phone_tests.rs"]
mod tests;
