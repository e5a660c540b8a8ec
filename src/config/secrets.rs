//! Keeping secrets out of what the gateway shows: a Redis URL's password is masked in logs,
//! `/admin/config`, `check` output and validation errors. The authority is split where the
//! URL parsers split it (the last `@`), so a password holding `@` shows no part of itself.

/// Hides the password (or lone credential) of a URL: `redis://user:s3cr@t@host` ->
/// `redis://user:***@host`; a URL without credentials comes back unchanged.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            // a lone credential (`redis://secret@host`) is a password too
            let shown = if userinfo.contains(':') { user } else { "" };
            format!("{scheme}://{shown}:***@{hosts}{tail}")
        }
        None => url.to_string(),
    }
}

/// Masks every URL credential found in `text` (an error message that quotes a URL).
pub fn redact_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let start = rest[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '+' || c == '.'))
            .map_or(0, |i| i + 1);
        out.push_str(&rest[..start]);
        let url_end = rest[at..]
            .find(|c: char| c.is_whitespace() || c == '`' || c == '"' || c == '\'')
            .map_or(rest.len(), |i| at + i);
        out.push_str(&redact_url(&rest[start..url_end]));
        rest = &rest[url_end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_wherever_the_parser_splits() {
        assert_eq!(
            redact_url("redis://:secret@host:6379"),
            "redis://:***@host:6379"
        );
        assert_eq!(
            redact_url("redis://user:p@ss@w0rd@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("redis://tok@host"), "redis://:***@host");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
        assert_eq!(
            redact_url("redis-sentinel://:pw@a:1,b:2/mymaster"),
            "redis-sentinel://:***@a:1,b:2/mymaster"
        );
        let text = "store.url: `rediss://u:p@x@h:1 ` is not valid";
        assert_eq!(
            redact_secrets(text),
            "store.url: `rediss://u:***@h:1 ` is not valid"
        );
    }
}
