//! The one spelling of text that upstreams read alike: [`trimmed`] of what frameworks strip
//! from a field's ends, then [`fold`]ed (NFKC, lower case). Many sign-in
//! forms normalise a username with NFKC before they look it up (Django's does), and many
//! lookups fold case beyond ASCII: a long `ſ` is an `s` to them, a full-width `ｓａｍ` is
//! `sam`. Counted as spelled, each such spelling would be a fresh key with its own attempts
//! against one account; folded, they share its key. (Merging spellings never weakens a limit:
//! whoever can send one spelling of a name can send the others.)

use icu_normalizer::ComposingNormalizerBorrowed;

/// `text` in NFKC and lower case (NFKC again after lowering, which can undo it), each letter as
/// lookups that ignore case read it ([`case_fold`]): `ß` is `ss` and a final `ς` is `σ`, as
/// Python's `casefold()`, SQL collations that ignore case and `UPPER()` lookups read them.
/// Characters that show nothing (Unicode's default-ignorable code points: `vic\u{200B}tim`) and
/// control characters are dropped wherever they stand: collations ignore them at every
/// strength, so a lookup through one reads `vic\u{200B}tim` as `victim`.
pub fn fold(text: &str) -> String {
    const NFKC: ComposingNormalizerBorrowed<'static> = ComposingNormalizerBorrowed::new_nfkc();
    let shows_nothing = |c: char| is_invisible(c) || c.is_control();
    let visible: std::borrow::Cow<'_, str> = match text.chars().any(shows_nothing) {
        true => text.chars().filter(|&c| !shows_nothing(c)).collect(),
        false => text.into(),
    };
    let lower: String = NFKC
        .normalize(&visible)
        .chars()
        .flat_map(case_fold)
        .collect();
    match NFKC.normalize(&lower) {
        std::borrow::Cow::Borrowed(_) => lower,
        std::borrow::Cow::Owned(again) => again,
    }
}

/// `c` as lookups that ignore case read it: the lower case of its upper case, as Java's
/// `equalsIgnoreCase`, .NET's ordinal ignore-case compare, `toUpperCase()` comparisons and
/// Python's `casefold()` read it (the dotless `ı` is `i`, `ß` is `ss`, `ᾳ` is `αι`, a Cyrillic
/// `ᲀ` is `в`); the dotted `İ` is `i` (its simple lower case), and the capital `ẞ` is `ss`, as
/// `ß` is (its lower case is `ß`, whose upper case is `SS`).
pub(super) fn case_fold(c: char) -> impl Iterator<Item = char> {
    let c = match c {
        'İ' => 'i',
        'ẞ' => 'ß',
        c => c,
    };
    c.to_uppercase().flat_map(char::to_lowercase)
}

/// `text` without what frameworks strip from either end of a field before they use it: Unicode
/// whitespace, control characters (Python's `strip()` takes U+001C to U+001F, Java's `trim()`
/// everything up to a space) and the byte-order mark (JavaScript's `trim()`).
pub fn trimmed(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || c.is_control() || c == '\u{FEFF}')
}

/// Characters that show nothing and that some readers drop: Unicode's default-ignorable code
/// points (the soft hyphen, the combining grapheme joiner, zero-width spaces and joiners,
/// direction marks, the word joiner and invisible operators, variation selectors, the byte
/// order mark, tags...), which collations ignore at every strength (ICU's, MySQL's
/// `utf8mb4_0900_*`, MongoDB's), and NUL (which a C string ends at).
pub(super) fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\0' | '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFF8}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

#[cfg(test)]
mod tests {
    use super::fold;

    #[test]
    fn compatibility_spellings_and_case_are_one() {
        for spelling in ["sam", "Sam", "SAM", "ſam", "ｓａｍ", "sａm", "ſａm", "Ｓam"] {
            assert_eq!(fold(spelling), "sam", "{spelling}");
        }
        assert_eq!(fold("Ünal"), "ünal");
        assert_eq!(fold("U\u{308}nal"), "ünal", "a combining mark is composed");
        assert_eq!(fold("straße"), "strasse");
        assert_eq!(fold("STRASSE"), "strasse");
        assert_eq!(fold("STRAẞE"), "strasse");
        assert_eq!(fold("straẞe"), "strasse");
        assert_eq!(fold("abcΣ"), fold("abcσ"), "a final sigma");
        assert_eq!(fold("abcς"), "abcσ");
        // what Java's equalsIgnoreCase and JavaScript's toUpperCase() take for the same letter
        for spelling in ["victim", "vıctim", "vİctim", "VICTIM", "VİCTİM"] {
            assert_eq!(fold(spelling), "victim", "{spelling}");
        }
        assert_eq!(fold("\u{1C80}ася"), "вася");
        // an iota subscript is an iota, as casefold() and toUpperCase() read it
        assert_eq!(fold("ᾳ"), fold("αι"));
    }

    #[test]
    fn what_shows_nothing_is_no_part_of_a_name() {
        for spelling in [
            "vic\u{200B}tim",
            "vic\u{00AD}tim",
            "vic\u{034F}tim",
            "victim\u{FE0F}",
            "vic\u{200E}tim",
            "v\u{2063}ictim",
            "vic\u{E0041}tim",
            "vic\u{1F}tim",
            "vic\u{85}tim",
        ] {
            assert_eq!(fold(spelling), "victim", "{spelling:?}");
        }
    }

    #[test]
    fn what_frameworks_strip_from_the_ends_is_no_part_of_a_name() {
        for spelling in [
            "sam",
            " sam\t",
            "sam\u{1f}",
            "\u{1c}sam\u{1d}\u{1e}",
            "\u{0}sam\u{1}",
            "\u{feff}sam",
            "sam\u{3000}",
        ] {
            assert_eq!(super::trimmed(spelling), "sam", "{spelling:?}");
        }
        assert_eq!(super::trimmed("s\u{1f}am"), "s\u{1f}am", "inside, it stays");
    }
}
