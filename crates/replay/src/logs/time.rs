//! Times as access logs write them, to Unix nanoseconds. Hand-written scanners: the formats
//! are fixed, and these run once per line.

const NANOS: u64 = 1_000_000_000;

/// Seconds (with fraction) or a date: RFC 3339 when the fifth character is `-`, nginx's
/// `$time_local` when the third is `/`, else Unix seconds.
pub(super) fn any(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() >= 10 && b[4] == b'-' {
        rfc3339(s)
    } else if b.len() >= 3 && b[2] == b'/' {
        nginx_local(s)
    } else {
        unix_seconds(s)
    }
}

/// RFC 3339 and the ISO 8601 forms loggers write: `2026-12-02T11:15:49.123456Z`,
/// `2026-12-02T11:15:49+01:00`, `2026-12-02 11:15:49,5+0100`. The fraction is optional (digits
/// past the ninth are dropped); no offset at all is read as UTC.
pub(super) fn rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let year = digits(b, 0, 4)?;
    let month = digits(b, 5, 2)?;
    let day = digits(b, 8, 2)?;
    let (hour, minute, second) = (digits(b, 11, 2)?, digits(b, 14, 2)?, digits(b, 17, 2)?);
    let mut i = 19;
    let mut frac = 0;
    if i < b.len() && matches!(b[i], b'.' | b',') {
        i += 1;
        let start = i;
        let mut scale = NANOS;
        while i < b.len() && b[i].is_ascii_digit() {
            if scale > 1 {
                scale /= 10;
                frac += u64::from(b[i] - b'0') * scale;
            }
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let offset = match &b[i..] {
        [] | [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), rest @ ..] => {
            let (h, m) = match rest {
                [_, _] => (digits(rest, 0, 2)?, 0),
                [_, _, _, _] => (digits(rest, 0, 2)?, digits(rest, 2, 2)?),
                [_, _, b':', _, _] => (digits(rest, 0, 2)?, digits(rest, 3, 2)?),
                _ => return None,
            };
            if h > 23 || m > 59 {
                return None;
            }
            let secs = i64::from(h * 3600 + m * 60);
            if *sign == b'-' {
                -secs
            } else {
                secs
            }
        }
        _ => return None,
    };
    to_nanos(year, month, day, hour, minute, second, offset, frac)
}

/// nginx's `$time_local`: `10/Oct/2000:13:55:36 -0700` (English month names).
pub(super) fn nginx_local(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() != 26
        || b[2] != b'/'
        || b[6] != b'/'
        || b[11] != b':'
        || b[14] != b':'
        || b[17] != b':'
        || b[20] != b' '
    {
        return None;
    }
    let day = digits(b, 0, 2)?;
    let month = month(&b[3..6])?;
    let year = digits(b, 7, 4)?;
    let (hour, minute, second) = (digits(b, 12, 2)?, digits(b, 15, 2)?, digits(b, 18, 2)?);
    let (h, m) = (digits(b, 22, 2)?, digits(b, 24, 2)?);
    if h > 23 || m > 59 {
        return None;
    }
    let offset = i64::from(h * 3600 + m * 60);
    let offset = match b[21] {
        b'+' => offset,
        b'-' => -offset,
        _ => return None,
    };
    to_nanos(year, month, day, hour, minute, second, offset, 0)
}

/// Unix seconds with an optional fraction: `1764672000`, `1764672000.25` (digits past the
/// ninth are dropped).
pub(super) fn unix_seconds(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut secs: u64 = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        secs = secs.checked_mul(10)?.checked_add(u64::from(b[i] - b'0'))?;
        i += 1;
    }
    if i == 0 {
        return None;
    }
    let mut frac = 0;
    if i < b.len() {
        if b[i] != b'.' {
            return None;
        }
        i += 1;
        let mut scale = NANOS;
        while i < b.len() {
            if !b[i].is_ascii_digit() {
                return None;
            }
            if scale > 1 {
                scale /= 10;
                frac += u64::from(b[i] - b'0') * scale;
            }
            i += 1;
        }
    }
    secs.checked_mul(NANOS)?.checked_add(frac)
}

/// Unix seconds as a JSON number, to the microsecond (what an `f64` holds of today's times).
pub(super) fn unix_seconds_f64(f: f64) -> Option<u64> {
    // 1.8e10 s is past what u64 nanoseconds hold (year 2554).
    if !f.is_finite() || !(0.0..1.8e10).contains(&f) {
        return None;
    }
    let secs = f.trunc();
    let micros = ((f - secs) * 1e6).round();
    // Both are whole, non-negative and in range: the casts are exact.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let (secs, micros) = (secs as u64, micros as u64);
    secs.checked_mul(NANOS)?.checked_add(micros * 1000)
}

/// `n` ASCII digits of `b` at `at`.
fn digits(b: &[u8], at: usize, n: usize) -> Option<u32> {
    let mut v = 0;
    for &c in b.get(at..at + n)? {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u32::from(c - b'0');
    }
    Some(v)
}

fn month(b: &[u8]) -> Option<u32> {
    const NAMES: [&[u8; 3]; 12] = [
        b"jan", b"feb", b"mar", b"apr", b"may", b"jun", b"jul", b"aug", b"sep", b"oct", b"nov",
        b"dec",
    ];
    let lower = [
        b[0].to_ascii_lowercase(),
        b[1].to_ascii_lowercase(),
        b[2].to_ascii_lowercase(),
    ];
    let i = NAMES.iter().position(|n| **n == lower)?;
    u32::try_from(i + 1).ok()
}

/// A checked civil time (a leap second `:60` is allowed and runs into the next minute) less
/// `offset` seconds, in Unix nanoseconds; `None` before 1970 or past what u64 holds.
#[allow(clippy::too_many_arguments)]
fn to_nanos(
    year: u32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    offset: i64,
    frac: u64,
) -> Option<u64> {
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day);
    let secs = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second) - offset;
    u64::try_from(secs)
        .ok()?
        .checked_mul(NANOS)?
        .checked_add(frac)
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests;
