//! ISO 8601 <-> Unix seconds without a date crate (UTC only, which is all we store).
// The civil-date algorithms read best with their published one-letter names.
#![allow(clippy::many_single_char_names)]

/// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn num(s: &str, a: usize, b: usize) -> Option<i64> {
    s.get(a..b)?.parse().ok()
}

/// Parses `YYYY-MM-DD[THH:MM[:SS[.fff]]][Z|±HH:MM]` to Unix seconds.
pub fn parse_iso(s: &str) -> Option<i64> {
    let s = s.trim();
    let (y, mo, d) = (num(s, 0, 4)?, num(s, 5, 7)?, num(s, 8, 10)?);
    if s.len() > 4 && &s[4..5] != "-" || !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
        return None;
    }
    let mut secs = days_from_civil(y, mo, d) * 86_400;
    let rest = s.get(10..).unwrap_or("");
    if rest.is_empty() {
        return Some(secs);
    }
    let rest = rest.strip_prefix(['T', ' '])?;
    let h = num(rest, 0, 2)?;
    let mi = num(rest, 3, 5)?;
    let mut i = 5;
    let mut sec = 0;
    if rest.get(5..6) == Some(":") {
        sec = num(rest, 6, 8)?;
        i = 8;
        if rest.get(8..9) == Some(".") {
            i = 9;
            while rest.as_bytes().get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
    }
    secs += h * 3600 + mi * 60 + sec;
    let tz = &rest[i..];
    match tz {
        "" | "Z" | "z" => Some(secs),
        _ => {
            let sign = match &tz[..1] {
                "+" => 1,
                "-" => -1,
                _ => return None,
            };
            let oh = num(tz, 1, 3)?;
            let om = if tz.len() >= 6 { num(tz, 4, 6)? } else { 0 };
            Some(secs - sign * (oh * 3600 + om * 60))
        }
    }
}

/// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_iso(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Now, as Unix seconds.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for s in [
            "1970-01-01T00:00:00Z",
            "2026-02-24T14:30:00Z",
            "2000-02-29T23:59:59Z",
        ] {
            assert_eq!(format_iso(parse_iso(s).unwrap()), s);
        }
        assert_eq!(
            parse_iso("2026-02-24T14:30:00.123+01:00"),
            parse_iso("2026-02-24T13:30:00Z")
        );
        assert_eq!(parse_iso("2026-02-24"), parse_iso("2026-02-24T00:00:00Z"));
        assert_eq!(parse_iso("garbage"), None);
        assert_eq!(parse_iso("2026-13-01"), None);
    }
}
