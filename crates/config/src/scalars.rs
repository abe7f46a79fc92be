//! The scalar readers every table uses: durations, on_error, DNS names, CIDRs, HTTP tokens,
//! quotas and UTC offsets, each reporting what is wrong with the key's path and line. The
//! text formats themselves (durations, rates) are parsed in [`crate::values`].

use crate::model::*;
use crate::reader::{as_str, Cx, Value};
use crate::values::parse_duration;
use ipnet::IpNet;
use std::net::IpAddr;
use std::time::Duration;
use tollgate_limit::CalendarUnit;

pub(crate) fn on_error(cx: &mut Cx, path: &str, v: &Value) -> Option<OnError> {
    match as_str(cx, path, v)? {
        "open" => Some(OnError::Open),
        "closed" => Some(OnError::Closed),
        "local" => Some(OnError::Local),
        "fail" => Some(OnError::Fail),
        other => {
            cx.err(
                path,
                v.span(),
                format!("unknown on_error \"{other}\" (open, closed, local or fail)"),
            );
            None
        }
    }
}

pub(crate) fn duration(cx: &mut Cx, path: &str, v: &Value) -> Option<Duration> {
    let s = as_str(cx, path, v)?;
    match parse_duration(s) {
        Ok(d) => Some(d),
        Err(e) => {
            cx.err(path, v.span(), e);
            None
        }
    }
}

/// A ratio from 0.0 to 1.0, written as a float or an integer (0, 1); `what` it is a ratio of
/// goes into the error.
pub(crate) fn ratio(cx: &mut Cx, path: &str, v: &Value, what: &str) -> Option<f64> {
    bounded(
        cx,
        path,
        v,
        1.0,
        format!("a ratio from 0.0 to 1.0 ({what})"),
    )
}

/// A number from 0.0 to `max` (`what` it counts).
pub(crate) fn number_in(cx: &mut Cx, path: &str, v: &Value, max: f64, what: &str) -> Option<f64> {
    bounded(
        cx,
        path,
        v,
        max,
        format!("a number from 0.0 to {max:.1} ({what})"),
    )
}

fn bounded(cx: &mut Cx, path: &str, v: &Value, max: f64, want: String) -> Option<f64> {
    let r = match v.get_ref() {
        toml::de::DeValue::Float(f) => f.as_str().replace('_', "").parse::<f64>().ok(),
        toml::de::DeValue::Integer(_) => crate::reader::as_int(cx, path, v).map(|i| i as f64),
        _ => {
            crate::reader::type_err(cx, path, v, &want);
            return None;
        }
    };
    match r {
        Some(r) if (0.0..=max).contains(&r) => Some(r),
        _ => {
            cx.err(path, v.span(), want);
            None
        }
    }
}

/// A DNS name: dot-separated labels of letters, digits, `-` and `_`.
pub fn dns_name(host: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    !host.is_empty() && host.len() <= 253 && host.split('.').all(label_ok)
}

pub(crate) fn cidr(
    cx: &mut Cx,
    path: &str,
    s: &str,
    span: std::ops::Range<usize>,
) -> Option<IpNet> {
    if let Ok(n) = s.parse::<IpNet>() {
        return Some(n.trunc());
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(IpNet::from(ip));
    }
    cx.err(
        path,
        span,
        format!("\"{s}\" is not an IP address or CIDR, e.g. \"10.0.0.0/8\" or \"2001:db8::/32\""),
    );
    None
}

pub fn http_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

pub(crate) fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// `N/day`, `N/week`, `N/month`, `N/year`.
pub(crate) fn parse_quota(s: &str) -> Option<(u64, CalendarUnit)> {
    let (n, unit) = s.trim().split_once('/')?;
    let n: u64 = n.trim().replace('_', "").parse().ok().filter(|n| *n >= 1)?;
    let unit = match unit.trim() {
        "day" => CalendarUnit::Day,
        "week" => CalendarUnit::Week,
        "month" => CalendarUnit::Month,
        "year" => CalendarUnit::Year,
        _ => return None,
    };
    Some((n, unit))
}

/// `+HH:MM` / `-HH:MM` (or `Z`) to seconds east of UTC.
pub(crate) fn parse_utc_offset(s: &str) -> Option<i32> {
    let s = s.trim();
    if s == "Z" || s == "UTC" {
        return Some(0);
    }
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':')?;
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    (h <= 14 && m < 60 && h.to_string().len() <= 2).then_some(sign * (h * 3600 + m * 60))
}

/// A route path as requests are matched: starts with `/`; no empty, `.` or `..` segment (a
/// trailing slash is fine), no backslash, space, control character, `?`, `#` or byte outside
/// ASCII, and escapes as the canonical form writes them (two upper-case hex digits, never an
/// unreserved character). The import of Ingress paths applies the same rule.
pub fn canonical_route_path(p: &str) -> bool {
    let Some(body) = p.strip_prefix('/') else {
        return false;
    };
    let body = body.strip_suffix('/').unwrap_or(body);
    let b = p.as_bytes();
    let escapes_ok = b
        .iter()
        .enumerate()
        .filter(|(_, &c)| c == b'%')
        .all(|(i, _)| match (b.get(i + 1), b.get(i + 2)) {
            (Some(&h), Some(&l)) => {
                let upper_hex = |c: u8| c.is_ascii_digit() || (b'A'..=b'F').contains(&c);
                let v = u8::from_str_radix(&p[i + 1..i + 3], 16).unwrap_or(0);
                let unreserved = v.is_ascii_alphanumeric() || b"-._~".contains(&v);
                upper_hex(h) && upper_hex(l) && !unreserved
            }
            _ => false,
        });
    escapes_ok
        && !b
            .iter()
            .any(|&c| c == b'\\' || c == b'?' || c == b'#' || !(0x21..0x7f).contains(&c))
        && (body.is_empty() || body.split('/').all(|seg| !matches!(seg, "" | "." | "..")))
}
