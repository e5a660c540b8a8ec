//! [`NameSighting`]: the quick look that tells a document which cannot hold a path from one that
//! may, before it is read. A member name of the path must be written in the document, either as
//! it is (`"total_tokens"`) or with a `\u` escape (`"total\u005ftokens"`): a name free of `"`,
//! `\`, `/` and control characters has no other spelling. So a document with neither cannot
//! hold the path, and is skipped by a search instead of being read byte by byte. In an OpenAI
//! stream of 20 events, one states `usage.total_tokens`; every other one says `"usage":null`,
//! so the path's last name is the one looked for.

use memchr::memchr_iter;
use memchr::memmem::Finder;

/// Looks for one member name of a path, quoted, in a whole document.
#[derive(Debug, Clone)]
pub struct NameSighting {
    /// `"name"`; `None` when no name of the path has a single spelling (every document may
    /// hold it).
    quoted: Option<Finder<'static>>,
}

impl NameSighting {
    /// The look for `path`'s last step that is a name with no other spelling than itself or
    /// `\u` escapes (an all-digit step may be an array's index, written nowhere).
    pub fn new(path: &[String]) -> NameSighting {
        let quoted = path
            .iter()
            .rev()
            .find(|step| has_one_plain_spelling(step))
            .map(|name| Finder::new(format!("\"{name}\"").as_bytes()).into_owned());
        NameSighting { quoted }
    }

    /// Whether `document` may hold the path: it writes the name, or has a `\u` escape.
    pub fn may_hold(&self, document: &[u8]) -> bool {
        match &self.quoted {
            None => true,
            Some(name) => name.find(document).is_some() || has_unicode_escape(document),
        }
    }
}

/// Whether `document` has a `\u` (an escaped backslash before a `u` counts too: it only makes
/// the document read). A search for the backslash alone: most documents have none.
fn has_unicode_escape(document: &[u8]) -> bool {
    memchr_iter(b'\\', document).any(|at| document.get(at + 1) == Some(&b'u'))
}

/// A name JSON writes only as itself or with `\u` escapes: no short escape (`\"`, `\\`, `\/`,
/// `\n`, ...) can stand for one of its characters, and it is no array index.
fn has_one_plain_spelling(step: &str) -> bool {
    !step.is_empty()
        && !step.bytes().all(|b| b.is_ascii_digit())
        && !step
            .bytes()
            .any(|b| matches!(b, b'"' | b'\\' | b'/') || b < 0x20)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sighting(path: &str) -> NameSighting {
        let path: Vec<String> = path.split('.').map(str::to_string).collect();
        NameSighting::new(&path)
    }

    #[test]
    fn a_document_without_the_last_name_cannot_hold_the_path() {
        let s = sighting("usage.total_tokens");
        assert!(!s.may_hold(br#"{"choices":[{"delta":{"content":"hi"}}],"usage":null}"#));
        assert!(s.may_hold(br#"{"usage":{"total_tokens":3}}"#));
        // a longer name is no sighting
        assert!(!s.may_hold(br#"{"total_tokens_x":1,"x_total_tokens":2}"#));
    }

    #[test]
    fn an_escape_that_could_spell_the_name_is_read() {
        let s = sighting("usage.total_tokens");
        assert!(s.may_hold(br#"{"usage":{"total\u005ftokens":3}}"#));
        // an escape after short ones
        assert!(s.may_hold(br#"{"c":"a\nb\\","usage":{"total\u005ftokens":3}}"#));
        // short escapes spell no letter of the name
        assert!(!s.may_hold(br#"{"choices":[{"delta":{"content":"a\nb\"c"}}]}"#));
    }

    #[test]
    fn a_path_of_indexes_or_names_with_other_spellings_reads_every_document() {
        for path in ["0.1", "a/b", "0"] {
            assert!(sighting(path).may_hold(b"{}"), "{path}");
        }
        // the last name of a path that ends in an index
        let s = sighting("choices.0");
        assert!(!s.may_hold(br#"{"usage":null}"#));
        assert!(s.may_hold(br#"{"choices":[1]}"#));
    }
}
