//! The one validator of conversation-log lines (design §5.2). `klaw reindex`, the
//! Python readers (`klaw logs`, `klaw usage`, the gateway's logbook) and the record
//! writer all go through `check_line`/`parse_ts`, so no two of them can read the same
//! file differently.
//!
//! Rules (tolerant where nothing is lost, strict where a value would be guessed):
//! - UTF-8, one JSON object, no duplicate fields;
//! - `id`: a non-empty string, or an integer (kept as its decimal text);
//! - `ts`: `YYYY-MM-DD[T| ]HH:MM[:SS[.fraction]]` with `Z` or `±HH:MM`, a real date;
//! - `role`: user, assistant, system or tool;
//! - `content`: a string; `null` is empty; any other JSON (tool results) is kept as
//!   its JSON text;
//! - `type`: a string or null; `meta`: an object or null. Other fields are ignored.
//!
//! A line without its final newline that fails is reported as a torn last line
//! (a power cut mid-append), whatever else is wrong with it.

use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

pub const ROLES: [&str; 4] = ["user", "assistant", "system", "tool"];

/// One valid log line, normalised, borrowing from the raw line where it can (a
/// string without escapes is a slice of it): reindex parses 1M lines with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLineRef<'a> {
    pub id: Cow<'a, str>,
    pub ts: Cow<'a, str>,
    pub ts_us: i64,
    pub role: Cow<'a, str>,
    pub content: Cow<'a, str>,
    pub kind: Option<Cow<'a, str>>,
    pub meta: Option<&'a str>,
}

impl LogLineRef<'_> {
    pub fn into_owned(self) -> LogLine {
        LogLine {
            id: self.id.into_owned(),
            ts: self.ts.into_owned(),
            ts_us: self.ts_us,
            role: self.role.into_owned(),
            content: self.content.into_owned(),
            kind: self.kind.map(Cow::into_owned),
            meta: self.meta.map(str::to_string),
        }
    }
}

/// One valid log line, normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub id: String,
    pub ts: String,
    /// `ts` as Unix microseconds (for ordering across time zones).
    pub ts_us: i64,
    pub role: String,
    pub content: String,
    pub kind: Option<String>,
    /// `meta` as its JSON text (an object), stored as is.
    pub meta: Option<String>,
}

// `present` keeps an explicit `null` as `Some("null")`: a missing `content` is an
// error, a null one is empty.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    ts: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    role: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    content: Option<&'a RawValue>,
    #[serde(rename = "type", default, borrow, deserialize_with = "present")]
    kind: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    meta: Option<&'a RawValue>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// A JSON string's value: a slice of the line unless it has escapes.
fn string(v: &RawValue) -> Option<Cow<'_, str>> {
    let t = v.get();
    if !t.starts_with('"') {
        return None;
    }
    // serde_json has already refused raw control characters in the string, so
    // without a backslash its value is the text between the quotes.
    let inner = &t[1..t.len() - 1];
    if memchr::memchr(b'\\', inner.as_bytes()).is_none() {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(t).ok().map(Cow::Owned)
}

/// A value for an error message, cut short: a hostile line can be megabytes.
fn shown(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{:?}...", &s[..i]),
        None => format!("{s:?}"),
    }
}

fn required<'a>(v: Option<&'a RawValue>, name: &str) -> Result<&'a RawValue, String> {
    v.ok_or_else(|| format!("missing required field '{name}'"))
}

fn digits(s: &str, a: usize, b: usize) -> Option<i64> {
    let part = s.get(a..b)?;
    if part.bytes().all(|c| c.is_ascii_digit()) {
        part.parse().ok()
    } else {
        None
    }
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses a record timestamp to Unix microseconds; `None` if it is not one.
/// A time zone is required: files are read on machines in other zones.
#[allow(clippy::many_single_char_names)] // date parts read best as y, d, h, b
pub fn parse_ts(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 16 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (y, mo, d) = (digits(s, 0, 4)?, digits(s, 5, 7)?, digits(s, 8, 10)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) {
        return None;
    }
    if b[13] != b':' {
        return None;
    }
    let (h, mi) = (digits(s, 11, 13)?, digits(s, 14, 16)?);
    let (mut sec, mut micros, mut i) = (0, 0i64, 16);
    if b.get(16) == Some(&b':') {
        sec = digits(s, 17, 19)?;
        i = 19;
        if b.get(19) == Some(&b'.') || b.get(19) == Some(&b',') {
            let start = 20;
            i = start;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == start {
                return None;
            }
            let frac = &s[start..i.min(start + 6)];
            micros = frac.parse::<i64>().ok()? * 10i64.pow(6 - frac.len() as u32);
        }
    }
    if h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    let offset = match &s[i..] {
        "Z" | "z" => 0,
        tz if tz.len() == 6 && tz.as_bytes()[3] == b':' || tz.len() == 5 => {
            let sign = match tz.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let oh = digits(tz, 1, 3)?;
            let om = if tz.len() == 6 {
                digits(tz, 4, 6)?
            } else {
                digits(tz, 3, 5)?
            };
            if oh > 23 || om > 59 {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
        _ => return None,
    };
    let days = crate::timeutil::days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset;
    Some(secs * 1_000_000 + micros)
}

/// Validates one raw line (with or without its newline).
pub fn check_line(raw: &[u8]) -> Result<LogLine, String> {
    check_line_ref(raw).map(LogLineRef::into_owned)
}

/// `check_line` without copying what the line already holds.
pub fn check_line_ref(raw: &[u8]) -> Result<LogLineRef<'_>, String> {
    let torn = raw.last() != Some(&b'\n');
    check_complete(raw).map_err(|reason| {
        if torn {
            format!("torn last line (no newline): {reason}")
        } else {
            reason
        }
    })
}

fn check_complete(raw: &[u8]) -> Result<LogLineRef<'_>, String> {
    let text = std::str::from_utf8(raw).map_err(|_| "invalid UTF-8".to_string())?;
    let text = text.trim_end_matches(['\n', '\r']);
    if text.trim().is_empty() {
        return Err("blank line".into());
    }
    if !text.trim_start().starts_with('{') {
        return match serde_json::from_str::<&RawValue>(text) {
            Ok(v) => Err(format!(
                "not a JSON object ({})",
                match v.get().as_bytes()[0] {
                    b'[' => "array",
                    b'"' => "string",
                    b't' | b'f' => "boolean",
                    b'n' => "null",
                    _ => "number",
                }
            )),
            Err(e) => Err(format!("invalid JSON: {e}")),
        };
    }
    let l: Line<'_> = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let id_raw = required(l.id, "id")?;
    let id = match string(id_raw) {
        Some(s) if !s.is_empty() => s,
        Some(_) => return Err("empty 'id'".into()),
        None => {
            let t = id_raw.get();
            let body = t.strip_prefix('-').unwrap_or(t);
            if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
                return Err("field 'id' is not a string or an integer".into());
            }
            Cow::Borrowed(t)
        }
    };
    let ts = string(required(l.ts, "ts")?).ok_or("field 'ts' is not a string")?;
    let ts_us = parse_ts(&ts).ok_or_else(|| format!("unparseable 'ts': {}", shown(&ts)))?;
    let role = string(required(l.role, "role")?).ok_or("field 'role' is not a string")?;
    if !ROLES.contains(&&*role) {
        return Err(format!("unknown role {}", shown(&role)));
    }
    let content_raw = required(l.content, "content")?;
    let content = match content_raw.get() {
        "null" => Cow::Borrowed(""),
        t if t.starts_with('"') => string(content_raw).ok_or("invalid content string")?,
        // Structured content (tool results) is kept as its JSON text.
        t => Cow::Borrowed(t),
    };
    let kind = match l.kind.map(RawValue::get) {
        None | Some("null") => None,
        Some(_) => Some(
            l.kind
                .and_then(string)
                .ok_or("field 'type' is not a string or null")?,
        ),
    };
    let meta = match l.meta.map(RawValue::get) {
        None | Some("null") => None,
        Some(t) if t.starts_with('{') => Some(t),
        Some(_) => return Err("field 'meta' is not an object".into()),
    };
    Ok(LogLineRef {
        id,
        ts,
        ts_us,
        role,
        content,
        kind,
        meta,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        let z = parse_ts("2026-02-24T14:30:00Z").unwrap();
        assert_eq!(parse_ts("2026-02-24T15:30:00+01:00"), Some(z));
        assert_eq!(parse_ts("2026-02-24T15:30:00+0100"), Some(z));
        assert_eq!(parse_ts("2026-02-24 14:30Z"), Some(z));
        assert_eq!(parse_ts("2026-02-24T14:30:00.5Z"), Some(z + 500_000));
        assert_eq!(parse_ts("2026-02-24T14:30:00.1234567Z"), Some(z + 123_456));
        for bad in [
            "2026-02-24T14:30:00",
            "2026-02-30T14:30:00Z",
            "2026-02-24T24:00:00Z",
            "2026-02-24",
            "garbage",
            "2026-02-24T14:30:00.Z",
            "2026-02-24T14:30:00+1",
            "+026-02-24T14:30:00Z",
        ] {
            assert_eq!(parse_ts(bad), None, "{bad}");
        }
    }

    #[test]
    fn lines() {
        let ok = check_line(
            br#"{"id":7,"ts":"2026-02-24T14:30:00Z","role":"tool","content":{"a":1},"meta":{"x":1}}
"#,
        )
        .unwrap();
        assert_eq!((ok.id.as_str(), ok.content.as_str()), ("7", "{\"a\":1}"));
        assert_eq!(ok.meta.as_deref(), Some("{\"x\":1}"));
        let reason = |l: &[u8]| check_line(l).unwrap_err();
        assert_eq!(reason(b"[1]\n"), "not a JSON object (array)");
        assert_eq!(
            reason(b"{\"id\":\"a\"\n"),
            "invalid JSON: EOF while parsing an object at line 1 column 9"
        );
        assert!(reason(b"{\"id\":\"a\"").starts_with("torn last line"));
        let meta = br#"{"id":"a","ts":"2026-02-24T14:30:00Z","role":"user","content":"","meta":[]}
"#;
        assert_eq!(reason(meta), "field 'meta' is not an object");
        let dup = br#"{"id":"a","id":"b","ts":"2026-02-24T14:30:00Z","role":"user","content":""}
"#;
        assert!(reason(dup).starts_with("invalid JSON: duplicate field"));
    }
}
