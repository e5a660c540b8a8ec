//! The phone rule against what libphonenumber (Python's `phonenumbers`) answers for named
//! spellings; `tests/phone_numbers_oracle.rs` holds it against the oracle on a generated corpus.

use super::*;

fn read(region: &str, text: &str) -> Option<String> {
    normalize_phone(text, Some(region.parse().expect("a region")))
}

/// What libphonenumber (Python's `phonenumbers`, its port) answers for these spellings.
#[test]
fn spellings_read_as_libphonenumber_reads_them() {
    for (region, text, e164) in [
        ("ID", "0812-3456-7890", "+6281234567890"),
        ("ID", "0812 3456 7890", "+6281234567890"),
        ("ID", "(0812) 3456.7890", "+6281234567890"),
        ("ID", "+62 812 3456 7890", "+6281234567890"),
        ("ID", "6281234567890", "+6281234567890"),
        ("ID", "٠٨١٢٣٤٥٦٧٨٩٠", "+6281234567890"),
        ("ID", "008 1 202 555 0143", "+12025550143"),
        ("ID", "+62812-349-458", "+62812349458"),
        ("JP", "+8190-1234-2527", "+819012342527"),
        ("BR", "+551196123-5291", "+5511961235291"),
        ("BR", "0014 1 202 555 0143", "+12025550143"),
        ("SG", "001 1 202 555 0143", "+12025550143"),
        ("SG", "0011 202 555 0143", "+12025550143"),
        ("US", "011 62 812 3456 7890", "+6281234567890"),
        ("US", "(202) 555-0143", "+12025550143"),
        ("DE", "030 123456", "+4930123456"),
        // full-width plus, dashes and digits, Unicode dashes and spaces, brackets
        ("ID", "\u{FF0B}6281234567890", "+6281234567890"),
        ("ID", "0812\u{FF0D}3456\u{FF0D}7890", "+6281234567890"),
        ("ID", "0812\u{2010}3456\u{2212}7890", "+6281234567890"),
        (
            "ID",
            "\u{FF10}\u{FF18}\u{FF11}\u{FF12} 3456 7890",
            "+6281234567890",
        ),
        ("ID", "0812\u{3000}3456\u{30FC}7890", "+6281234567890"),
        ("ID", "[0812] 3456\u{00AD}78\u{200B}90", "+6281234567890"),
        ("ID", "0812\u{FF0F}3456\u{FF0E}7890", "+6281234567890"),
        ("ID", "0812\u{FF3B}3456\u{FF3D}7890", "+6281234567890"),
        // what libphonenumber drops around the number, and its star sign
        ("ID", "++6281234567890", "+6281234567890"),
        ("ID", "*+62 812 3456 7890", "+6281234567890"),
        ("ID", "\"0812-3456-7890\",", "+6281234567890"),
        ("ID", "0812 3456 7890;", "+6281234567890"),
        ("ID", "+62*812*3456*7890*", "+6281234567890"),
        // every script's decimal digits, at the ends too: Khmer, Balinese, Javanese, Sundanese
        ("ID", "0812 3456 789\u{17E0}", "+6281234567890"),
        ("ID", "0812 3456 78\u{17E9}\u{17E0}", "+6281234567890"),
        ("ID", "\u{1B50}\u{1B58}\u{1B51}234567890", "+6281234567890"),
        ("ID", "0812 3456 789\u{A9D0}", "+6281234567890"),
        ("ID", "0812 3456 789\u{1BB0}", "+6281234567890"),
        ("ID", "\u{1810}812 3456 7890", "+6281234567890"),
    ] {
        assert_eq!(read(region, text).as_deref(), Some(e164), "{region} {text}");
    }
    assert_eq!(
        normalize_phone("+6281234567890", None).as_deref(),
        Some("+6281234567890")
    );
}

#[test]
fn letters_foreign_prefixes_and_junk_are_no_number() {
    for (region, text) in [
        ("ID", "0812 3456 7890a"),
        ("ID", "0812a 3456 7890"),
        ("ID", "+62 812 3456 7890 x12"),
        ("ID", "tel:+6281234567890"),
        ("US", "1-800-FLOWERS"),
        // not the region's own prefix: libphonenumber reads a national number, not valid
        ("ID", "006281234567890"),
        ("US", "00 62 812 3456 7890"),
        ("BR", "00 1 202 555 0143"),
        ("ID", "0812+3456+7890"),
        ("ID", "+ +6281234567890"),
        ("ID", "+6281234567890#"),
        ("ID", "phone: +6281234567890"),
        ("ID", "0812*3456*7890x"),
        ("ID", "0812#34567890"),
        // libphonenumber reads a tilde as more than punctuation (`~7890` is dropped)
        ("ID", "0812~3456~7890"),
        ("ID", "0812\u{FF5E}3456\u{FF5E}7890"),
        // a katakana middle dot is no punctuation to it
        ("ID", "0812\u{30FB}3456 7890"),
        ("ID", ""),
        ("ID", "hello"),
        ("ID", "123"),
        ("ID", "+62"),
        ("ID", "+999123456789"),
        // numeric but no digit libphonenumber ports agree on: refused, not dropped
        ("ID", "0812 3456 7890 \u{00BD}"),
        ("ID", "0812 3456 789\u{00B2}"),
        ("ID", "\u{2460}0812 3456 7890"),
        ("ID", "0812 3456 789\u{1D7CE}"),
    ] {
        assert_eq!(read(region, text), None, "{region} {text}");
    }
    assert_eq!(read("ID", &"9".repeat(40)), None);
    // without a region only `+` gives the country
    assert_eq!(normalize_phone("081234567890", None), None);
    assert_eq!(normalize_phone("0062 81234567890", None), None);
}
