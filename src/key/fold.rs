//! The one spelling of text that upstreams read alike: NFKC, then lower case. Many sign-in
//! forms normalise a username with NFKC before they look it up (Django's does), and many
//! lookups fold case beyond ASCII: a long `ſ` is an `s` to them, a full-width `ｓａｍ` is
//! `sam`. Counted as spelled, each such spelling would be a fresh key with its own attempts
//! against one account; folded, they share its key. (Merging spellings never weakens a limit:
//! whoever can send one spelling of a name can send the others.)

use icu_normalizer::ComposingNormalizerBorrowed;

/// `text` in NFKC and lower case (NFKC again after lowering, which can undo it).
pub fn fold(text: &str) -> String {
    const NFKC: ComposingNormalizerBorrowed<'static> = ComposingNormalizerBorrowed::new_nfkc();
    let lower = NFKC.normalize(text).to_lowercase();
    match NFKC.normalize(&lower) {
        std::borrow::Cow::Borrowed(_) => lower,
        std::borrow::Cow::Owned(again) => again,
    }
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
        assert_eq!(fold("straße"), "straße", "no full case folding: ß stays");
    }
}
