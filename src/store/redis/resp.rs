//! RESP2 as the lane's own connection ([`super::direct`]) speaks it: commands written as arrays
//! of bulk strings into a caller's buffer, and replies parsed from the bytes read so far.
//!
//! Differences from the client library's codec: only the reply shapes a decision call, `WAIT`,
//! the connection's handshake and a sentinel's master address return are read (integers, bulk and simple strings, errors,
//! nil, arrays of these, nested); the server is never switched to RESP3, so maps, sets,
//! doubles and pushes never arrive, and meeting one is a protocol error (the connection is
//! then closed). An error reply becomes the same [`FredError`] the library makes of it (the
//! whole line as its details, the kind chosen by its first word), so the store sorts it the
//! same way (`NOSCRIPT`, "Function not found", `MOVED`...).

use fred::error::{Error as FredError, ErrorKind};
use fred::types::{Key, Value};

/// The deepest nesting of arrays a reply may have.
const MAX_DEPTH: usize = 8;
/// The largest bulk string or array a reply may announce (a decision reply is far smaller).
const MAX_LEN: i64 = 512 * 1024 * 1024;

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `:n`
    Integer(i64),
    /// `$n` (`None`: `$-1`, nil).
    Bulk(Option<Vec<u8>>),
    /// `+text`
    Simple(String),
    /// `-text`: the whole line, its first word the error's kind.
    Error(String),
    /// `*n` (`None`: `*-1`, nil).
    Array(Option<Vec<Reply>>),
}

/// Bytes the server sent that are not a reply this parser reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// Parses one reply from the front of `buf`: the reply and how many bytes it took, `None` while
/// it is incomplete (read more and call again with the same bytes and more).
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, ProtocolError> {
    let mut at = 0;
    Ok(parse_at(buf, &mut at, 0)?.map(|reply| (reply, at)))
}

fn parse_at(buf: &[u8], at: &mut usize, depth: usize) -> Result<Option<Reply>, ProtocolError> {
    let Some(&kind) = buf.get(*at) else {
        return Ok(None);
    };
    let Some(line) = line(buf, *at + 1) else {
        return Ok(None);
    };
    let after_line = *at + 1 + line.len() + 2;
    let reply = match kind {
        b':' => Reply::Integer(number(line)?),
        b'+' => Reply::Simple(String::from_utf8_lossy(line).into_owned()),
        b'-' => Reply::Error(String::from_utf8_lossy(line).into_owned()),
        b'$' => {
            let len = length(line)?;
            let Some(len) = len else {
                *at = after_line;
                return Ok(Some(Reply::Bulk(None)));
            };
            let end = after_line + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(ProtocolError("a bulk string does not end with CRLF".into()));
            }
            *at = end + 2;
            return Ok(Some(Reply::Bulk(Some(buf[after_line..end].to_vec()))));
        }
        b'*' => {
            if depth >= MAX_DEPTH {
                return Err(ProtocolError("arrays nested too deep".into()));
            }
            let Some(len) = length(line)? else {
                *at = after_line;
                return Ok(Some(Reply::Array(None)));
            };
            let mut cursor = after_line;
            let mut items = Vec::with_capacity(len.min(4096));
            for _ in 0..len {
                match parse_at(buf, &mut cursor, depth + 1)? {
                    Some(item) => items.push(item),
                    None => return Ok(None),
                }
            }
            *at = cursor;
            return Ok(Some(Reply::Array(Some(items))));
        }
        other => {
            return Err(ProtocolError(format!(
                "unexpected reply type byte {:?}",
                other as char
            )))
        }
    };
    *at = after_line;
    Ok(Some(reply))
}

/// The line that starts at `from`, without its CRLF (`None`: not complete yet).
fn line(buf: &[u8], from: usize) -> Option<&[u8]> {
    let rest = buf.get(from..)?;
    // a plain scan: lines are a few bytes (a number, a length), shorter than a vectorised
    // search's set-up
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some(&rest[..end])
}

fn number(line: &[u8]) -> Result<i64, ProtocolError> {
    decimal(line)
        .ok_or_else(|| ProtocolError(format!("not a number: {:?}", String::from_utf8_lossy(line))))
}

/// `line` as a signed decimal, as `str::parse::<i64>` reads it (a sign, then at least one digit;
/// `None` past the range), read from the bytes without a UTF-8 check first.
fn decimal(line: &[u8]) -> Option<i64> {
    let (negative, digits) = match line {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, line),
    };
    if digits.is_empty() {
        return None;
    }
    // accumulated on the sign's side, so that i64::MIN reads too
    digits.iter().try_fold(0i64, |n, &b| {
        let digit = i64::from(b.wrapping_sub(b'0'));
        if digit > 9 {
            return None;
        }
        let shifted = n.checked_mul(10)?;
        match negative {
            true => shifted.checked_sub(digit),
            false => shifted.checked_add(digit),
        }
    })
}

/// A bulk string's or an array's length (`None`: -1, nil).
fn length(line: &[u8]) -> Result<Option<usize>, ProtocolError> {
    match number(line)? {
        -1 => Ok(None),
        n if (0..=MAX_LEN).contains(&n) => Ok(Some(n as usize)),
        n => Err(ProtocolError(format!("length out of range: {n}"))),
    }
}

impl Reply {
    /// The reply as the client library would hand it over: an error reply as its error.
    pub fn into_value(self) -> Result<Value, FredError> {
        Ok(match self {
            Reply::Integer(n) => Value::Integer(n),
            Reply::Bulk(Some(bytes)) => match String::from_utf8(bytes) {
                Ok(text) => Value::String(text.into()),
                Err(e) => Value::Bytes(e.into_bytes().into()),
            },
            Reply::Bulk(None) | Reply::Array(None) => Value::Null,
            Reply::Simple(text) => Value::String(text.into()),
            Reply::Error(line) => return Err(server_error(&line)),
            Reply::Array(Some(items)) => Value::Array(
                items
                    .into_iter()
                    .map(Reply::into_value)
                    .collect::<Result<_, _>>()?,
            ),
        })
    }

    /// An array of integers as such (the decision code's reply), without building a
    /// [`Value`]; any other shape as the library would convert it.
    pub fn into_integers(self) -> Result<Vec<i64>, FredError> {
        if let Reply::Array(Some(items)) = &self {
            let ints: Option<Vec<i64>> = items
                .iter()
                .map(|r| match r {
                    Reply::Integer(n) => Some(*n),
                    _ => None,
                })
                .collect();
            if let Some(ints) = ints {
                return Ok(ints);
            }
        }
        self.into_value()?.convert()
    }
}

/// The error the client library makes of an error reply `line`: the whole line as its details,
/// its kind from the first word.
pub fn server_error(line: &str) -> FredError {
    let mut words = line.split_whitespace();
    let kind = match words.next().unwrap_or("") {
        "WRONGTYPE" => ErrorKind::InvalidArgument,
        "NOAUTH" | "WRONGPASS" => ErrorKind::Auth,
        "MOVED" | "ASK" | "CLUSTERDOWN" => ErrorKind::Cluster,
        "Invalid" => match words.next().unwrap_or("") {
            "argument(s)" | "Argument" => ErrorKind::InvalidArgument,
            "command" | "Command" => ErrorKind::InvalidCommand,
            _ => ErrorKind::Unknown,
        },
        _ => ErrorKind::Unknown,
    };
    let details = if line.is_empty() {
        "No response!"
    } else {
        line
    };
    FredError::new(kind, details.to_string())
}

/// Appends the header of a command of `parts` arguments (its name included).
pub fn push_array(out: &mut Vec<u8>, parts: usize) {
    out.push(b'*');
    push_decimal(out, parts as i64);
    out.extend_from_slice(b"\r\n");
}

/// Appends one argument as a bulk string.
pub fn push_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'$');
    push_decimal(out, bytes.len() as i64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Appends `AUTH [username] password` (an empty username is none).
pub fn push_auth(out: &mut Vec<u8>, username: Option<&str>, password: &str) {
    let user = username.filter(|u| !u.is_empty());
    push_array(out, 2 + usize::from(user.is_some()));
    push_bulk(out, b"AUTH");
    if let Some(user) = user {
        push_bulk(out, user.as_bytes());
    }
    push_bulk(out, password.as_bytes());
}

/// Appends a key.
pub fn push_key(out: &mut Vec<u8>, key: &Key) {
    push_bulk(out, key.as_bytes());
}

/// Appends an argument as the client library would send it; `false` (nothing appended) for a
/// value it would not send as one bulk string (a map, an array, a queued reply).
pub fn push_value(out: &mut Vec<u8>, value: &Value) -> bool {
    match value {
        Value::Integer(n) => push_bulk(out, itoa::Buffer::new().format(*n).as_bytes()),
        Value::String(s) => push_bulk(out, s.as_bytes()),
        Value::Bytes(b) => push_bulk(out, b),
        Value::Double(f) => push_bulk(out, f.to_string().as_bytes()),
        Value::Boolean(b) => push_bulk(out, if *b { b"true" } else { b"false" }),
        Value::Null => push_bulk(out, b""),
        _ => return false,
    }
    true
}

/// Appends `n` in decimal (what RESP's lengths and integers, and the decisions' list, are
/// written in).
pub fn push_decimal(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
#[path = "resp_tests.rs"]
mod tests;
