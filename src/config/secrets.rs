//! Keeping secrets out of what the gateway shows: a configured value (a Redis or upstream URL,
//! the value of an environment variable that overrides one) appears in logs, `/admin/config`,
//! `check` output and validation errors only through [`redact_url`], also when it does not
//! parse: an operator's typo (`rediss//:pw@h`, a space in a password) must not print the
//! password in a log that many people read.
//!
//! Differences from redacting a parsed URL: the value is not parsed. Everything before the
//! last `@` (after the scheme) is userinfo, since a password may hold `/`, `?` or `#` when it
//! was not percent-encoded; a `:` after a host that is not followed by a port number may be a
//! password whose `@host` was left out (the whole `user:pw` is masked); query and `;`
//! parameters that name a password or a token keep their name only, and where such a value
//! comes before the last `@`, the `@` is taken as part of it too (everything up to the next
//! parameter is masked). Hiding too much costs a moment of reading; showing a password cannot
//! be taken back.

/// `value` with its userinfo (user and password), a host whose port is not a number, and the values
/// of password or token query parameters replaced by `***`: `redis://user:pw@host` ->
/// `redis://***@host`. A value with nothing of the kind comes back unchanged.
pub fn redact_url(value: &str) -> String {
    let scheme = scheme_len(value);
    let (head, rest) = value.split_at(scheme);
    let mut out = String::from(head);
    let after = match rest.rsplit_once('@') {
        None => rest,
        Some((before, after)) => {
            out.push_str("***@");
            if ends_in_a_secret_value(before) {
                // `?password=p@ss`: the value runs on past the `@` to the next parameter
                out.push_str("***");
                &after[after.find(['&', ';']).unwrap_or(after.len())..]
            } else {
                after
            }
        }
    };
    let (location, params) = after.split_at(after.find(['?', ';']).unwrap_or(after.len()));
    out.push_str(&mask_ports(location));
    out.push_str(&mask_params(params));
    out
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
        let url_end = url_end(rest, start, at);
        out.push_str(&redact_url(&rest[start..url_end]));
        rest = &rest[url_end..];
    }
    out.push_str(rest);
    out
}

/// Where the URL whose `://` is at `at` (its scheme from `start`) ends in `text`: at a space or
/// a quote; but a password may hold a space, so where an `@` follows before the quote or line
/// ends, the URL runs on past it (redacting too much is safe, too little is not).
fn url_end(text: &str, start: usize, at: usize) -> usize {
    let quote = |c: char| c == '`' || c == '"' || c == '\'';
    let end_from = |from: usize| {
        text[from..]
            .find(|c: char| c.is_whitespace() || quote(c))
            .map_or(text.len(), |i| from + i)
    };
    let end = end_from(at);
    if text[start..end].contains('@') {
        return end;
    }
    let line_end = text[end..]
        .find(|c: char| quote(c) || c == '\n')
        .map_or(text.len(), |i| end + i);
    match text[end..line_end].find('@') {
        Some(i) => end_from(end + i),
        None => end,
    }
}

/// The length of a scheme and the `:`/`/` run after it (`redis://`, or the typo `rediss//`);
/// 0 when the value does not start with one (a bare `user:pw@host` has no scheme: its `user:`
/// is userinfo).
fn scheme_len(value: &str) -> usize {
    let word = value
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .unwrap_or(value.len());
    let run = value[word..]
        .find(|c: char| c != ':' && c != '/')
        .unwrap_or(value.len() - word);
    // The separator ends at its last `/`: a `:` after it starts the userinfo (`redis://:pw@h`).
    match value[word..word + run].rfind('/') {
        Some(slash) if word > 0 => word + slash + 1,
        _ => 0,
    }
}

/// Whether `text` ends inside the value of a parameter that names a secret (`h/0?password=ab`).
fn ends_in_a_secret_value(text: &str) -> bool {
    let Some(start) = text.rfind(['?', '&', ';']) else {
        return false;
    };
    (text[start + 1..].split_once('=')).is_some_and(|(name, _)| names_a_secret(name))
}

/// Hosts (`h1:p1,h2:p2`, then an optional path) with every host whose `:` is not followed by a
/// port number masked whole: `user:pw` with its `@host` left out.
fn mask_ports(hosts_and_path: &str) -> String {
    let (hosts, path) = match hosts_and_path.find('/') {
        Some(i) => hosts_and_path.split_at(i),
        None => (hosts_and_path, ""),
    };
    let masked: Vec<String> = hosts
        .split(',')
        .map(|host| {
            let after_bracket = host.rfind(']').map_or(0, |i| i + 1);
            match host[after_bracket..].find(':') {
                Some(i) => {
                    let colon = after_bracket + i;
                    let port = &host[colon + 1..];
                    if port.bytes().all(|b| b.is_ascii_digit()) {
                        host.to_string()
                    } else {
                        "***".to_string()
                    }
                }
                None => host.to_string(),
            }
        })
        .collect();
    format!("{}{path}", masked.join(","))
}

/// Parameters (a query, or `;` parameters of a path), each kept with the separator after it,
/// with the values of those that name a password, a secret or a token masked
/// (`?sentinelPassword=***&node=h:1`).
fn mask_params(params: &str) -> String {
    params
        .split_inclusive(['?', '&', ';'])
        .map(|piece| {
            let pair = piece.trim_end_matches(['?', '&', ';']);
            match pair.split_once('=') {
                Some((name, _)) if names_a_secret(name) => {
                    format!("{name}=***{}", &piece[pair.len()..])
                }
                _ => piece.to_string(),
            }
        })
        .collect()
}

fn names_a_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["pass", "pwd", "secret", "token", "auth"]
        .iter()
        .any(|word| name.contains(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_masked_wherever_the_parser_splits() {
        for (url, shown) in [
            ("redis://:secret@host:6379", "redis://***@host:6379"),
            (
                "redis://user:p@ss@w0rd@host:6379/0",
                "redis://***@host:6379/0",
            ),
            ("redis://tok@host", "redis://***@host"),
            ("redis://host:6379", "redis://host:6379"),
            ("redis://host:6379/2", "redis://host:6379/2"),
            ("redis://[::1]:6379", "redis://[::1]:6379"),
            (
                "redis-sentinel://:pw@a:1,b:2/mymaster",
                "redis-sentinel://***@a:1,b:2/mymaster",
            ),
            ("redis-cluster://a:1,b:2", "redis-cluster://a:1,b:2"),
            ("http://127.0.0.1:9000/base", "http://127.0.0.1:9000/base"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn values_that_do_not_parse_show_no_secret_either() {
        for (value, shown) in [
            ("rediss//:pw@h", "rediss//***@h"),
            ("redis:/user:pw@h", "redis:/***@h"),
            ("redis://user:pw@", "redis://***@"),
            ("redis://user:p w@h", "redis://***@h"),
            ("redis://us er:pw@h:6379", "redis://***@h:6379"),
            ("redis://u:pa/ss@h", "redis://***@h"),
            ("redis://u:pa?ss@h", "redis://***@h"),
            ("redis://u:pa#ss@h", "redis://***@h"),
            ("user:pw@h", "***@h"),
            (":pw@h:6379", "***@h:6379"),
            ("redis://user:pw", "redis://***"),
            ("redis://:pw", "redis://***"),
            ("redis://h:6379,g:pw", "redis://h:6379,***"),
            ("redis://user:pw/0", "redis://***/0"),
            (
                "redis-sentinel://h:26379/m?sentinelPassword=pw&node=g:1",
                "redis-sentinel://h:26379/m?sentinelPassword=***&node=g:1",
            ),
            ("not a url", "not a url"),
            ("", ""),
        ] {
            let redacted = redact_url(value);
            assert_eq!(redacted, shown, "{value}");
            assert!(
                !redacted.contains("pw") && !redacted.contains("pa"),
                "{redacted}"
            );
        }
    }

    #[test]
    fn a_password_given_as_a_parameter_is_masked_whole() {
        for (value, shown) in [
            ("redis://h:1/0?password=ab@cdSECRET", "redis://***@***"),
            (
                "redis://h:1/0?password=ab@cdSECRET&node=g:1",
                "redis://***@***&node=g:1",
            ),
            (
                "redis://h:1/?x=1;password=SECRET",
                "redis://h:1/?x=1;password=***",
            ),
            (
                "redis://h:1/0;password=SECRET",
                "redis://h:1/0;password=***",
            ),
            (
                "redis://h:1/0?token=SECRET?&x=1",
                "redis://h:1/0?token=***?&x=1",
            ),
        ] {
            let redacted = redact_url(value);
            assert_eq!(redacted, shown, "{value}");
            assert!(!redacted.contains("SECRET"), "{redacted}");
        }
    }

    #[test]
    fn urls_quoted_in_a_message_are_masked() {
        let text = "store.url: `rediss://u:p@x@h:1 ` is not valid";
        assert_eq!(
            redact_secrets(text),
            "store.url: `rediss://***@h:1 ` is not valid"
        );
    }
}
