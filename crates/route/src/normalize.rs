//! The one place that turns what a client wrote into what every later step reads: the path
//! and host that routing, access lists and keys see, and that the upstream is sent.
//!
//! Why: a gateway that routes on the raw path and an upstream that decodes and normalises it
//! (as nearly every framework does) disagree on what was asked, and every spelling of a
//! protected path that the gateway does not recognise (`//login`, `/x/../login`, `/%6cogin`)
//! walks around its limits and lists. Here each path has one canonical spelling, the upstream
//! receives exactly that spelling, and what cannot be made canonical safely is refused (400).
//!
//! The rules (docs/hardening.md shows them with examples):
//! - percent-encoded unreserved characters (`A-Z a-z 0-9 - . _ ~`) are decoded; every other
//!   escape is kept, its hex digits upper-cased (`%3b` -> `%3B`); a `%` not followed by two hex
//!   digits is refused;
//! - `%2F` and `%5C` (an encoded `/` or `\`) follow `escaped_slashes`: refused, kept as they
//!   are (one segment, as nginx with `merge_slashes` does; the upstream may still decode it,
//!   which is the risk), or decoded to a `/` that separates segments;
//! - a raw `\`, a control character (raw or encoded, `%00` included): refused;
//! - dot segments are resolved after decoding (`/%2e%2e/` is `..`); one that climbs above the
//!   root is refused;
//! - with `merge_slashes`, repeated slashes are one; a trailing slash is kept.
//!
//! Hosts: lower-cased, the port and one trailing dot removed, and checked as a DNS name or an
//! IP literal; anything else is refused.

use std::borrow::Cow;
use tollgate_config::model::EscapedSlashes;

/// Why a path or host was refused (the 400's detail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NotAbsolute,
    BadEscape,
    EncodedSlash,
    Backslash,
    Control,
    AboveRoot,
    BadHost,
}

impl Refusal {
    pub fn detail(self) -> &'static str {
        match self {
            Refusal::NotAbsolute => "The request path must start with \"/\".",
            Refusal::BadEscape => "The request path holds a \"%\" that is not followed by two hex digits.",
            Refusal::EncodedSlash => {
                "The request path holds an encoded slash or backslash (%2F, %5C), which this gateway does not accept."
            }
            Refusal::Backslash => "The request path holds a backslash.",
            Refusal::Control => "The request path holds a control character or NUL.",
            Refusal::AboveRoot => "The request path climbs above the root with \"..\".",
            Refusal::BadHost => "The Host header (or :authority) is not a valid host name.",
        }
    }
}

/// How paths are made canonical (from `[server]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathRules {
    pub merge_slashes: bool,
    pub escaped_slashes: EscapedSlashes,
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn is_control(b: u8) -> bool {
    b < 0x20 || b == 0x7f
}

/// Nothing in the path can need a change: ASCII without escape, backslash, control character,
/// empty or dot segment. Most paths are like this and are borrowed as they are.
fn plainly_canonical(b: &[u8]) -> bool {
    b.first() == Some(&b'/')
        && !b
            .iter()
            .any(|&c| c == b'%' || c == b'\\' || is_control(c) || !c.is_ascii())
        && !b.windows(2).any(|w| w == b"//")
        // A `.` or `..` segment (`/.well-known` is a name).
        && !b[1..]
            .split(|&c| c == b'/')
            .any(|seg| seg == b"." || seg == b"..")
}

fn hex_value(h: u8) -> Option<u8> {
    (h as char).to_digit(16).map(|d| d as u8)
}

/// Appends `%XX` (upper-case hex) for `b`.
fn push_escaped(seg: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    seg.push('%');
    seg.push(HEX[(b >> 4) as usize] as char);
    seg.push(HEX[(b & 0xf) as usize] as char);
}

/// The canonical spelling of `path` (the path of the request target as the client sent it,
/// without its query), or why it is refused. Borrowed when the path is already canonical.
/// Bytes outside ASCII (UTF-8 or not) are percent-encoded, so `/é` and `/%C3%A9` are one
/// path.
pub fn normalize_path(path: &[u8], rules: PathRules) -> Result<Cow<'_, str>, Refusal> {
    if plainly_canonical(path) {
        // ASCII, as checked just above.
        if let Ok(p) = std::str::from_utf8(path) {
            return Ok(Cow::Borrowed(p));
        }
    }
    let Some(rest) = path.strip_prefix(b"/") else {
        return Err(Refusal::NotAbsolute);
    };
    // Segments with unreserved escapes decoded; a decoded slash may split one raw segment.
    let mut segments: Vec<String> = Vec::new();
    for bytes in rest.split(|&b| b == b'/') {
        let mut seg = String::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b == b'%' {
                let hex = bytes.get(i + 1..i + 3);
                let Some(v) = hex.and_then(|h| Some((hex_value(h[0])? << 4) | hex_value(h[1])?))
                else {
                    return Err(Refusal::BadEscape);
                };
                i += 3;
                if is_unreserved(v) {
                    seg.push(v as char);
                } else if v == b'/' || v == b'\\' {
                    match rules.escaped_slashes {
                        EscapedSlashes::Reject => return Err(Refusal::EncodedSlash),
                        EscapedSlashes::Keep => seg.push_str(if v == b'/' { "%2F" } else { "%5C" }),
                        EscapedSlashes::Decode => segments.push(std::mem::take(&mut seg)),
                    }
                } else if is_control(v) {
                    return Err(Refusal::Control);
                } else {
                    push_escaped(&mut seg, v);
                }
                continue;
            }
            if b == b'\\' {
                return Err(Refusal::Backslash);
            }
            if is_control(b) {
                return Err(Refusal::Control);
            }
            if b.is_ascii() {
                seg.push(b as char);
            } else {
                push_escaped(&mut seg, b);
            }
            i += 1;
        }
        segments.push(seg);
    }
    // Dot segments and empty ones, as RFC 3986 5.2.4 (and a trailing slash kept).
    let last = segments.len() - 1;
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    let mut trailing_slash = false;
    for (i, s) in segments.iter().enumerate() {
        trailing_slash = false;
        match s.as_str() {
            "." => trailing_slash = true,
            ".." => {
                if out.pop().is_none() {
                    return Err(Refusal::AboveRoot);
                }
                trailing_slash = true;
            }
            "" if i == last => trailing_slash = true,
            "" if rules.merge_slashes => {}
            s => out.push(s),
        }
    }
    let mut canonical = String::with_capacity(path.len());
    for s in &out {
        canonical.push('/');
        canonical.push_str(s);
    }
    if trailing_slash || out.is_empty() {
        canonical.push('/');
    }
    Ok(Cow::Owned(canonical))
}

/// The canonical host of a `Host` header or `:authority`: lower case, without port or one
/// trailing dot; an IPv6 literal without its brackets. Borrowed when already so.
pub fn normalize_host(raw: &str) -> Result<Cow<'_, str>, Refusal> {
    if let Some(rest) = raw.strip_prefix('[') {
        // userinfo@ never belongs in a Host header.
        if raw.contains('@') {
            return Err(Refusal::BadHost);
        }
        let (v6, after) = rest.split_once(']').ok_or(Refusal::BadHost)?;
        if !(after.is_empty() || valid_port(after.strip_prefix(':').ok_or(Refusal::BadHost)?)) {
            return Err(Refusal::BadHost);
        }
        let ip: std::net::Ipv6Addr = v6.parse().map_err(|_| Refusal::BadHost)?;
        // One spelling per address: the parsed form (`::1`, not `0::1`).
        let text = ip.to_string();
        return Ok(if text == v6 {
            Cow::Borrowed(v6)
        } else {
            Cow::Owned(text)
        });
    }
    let host = match raw.rsplit_once(':') {
        // A port is digits only, so an `@` there is refused with it.
        Some((h, port)) if valid_port(port) => h,
        Some(_) => return Err(Refusal::BadHost),
        None => raw,
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    // One pass over the name: labels of 1 to 63 letters, digits, `-` or `_` (so no `@`,
    // no `:` and no space), and whether any letter needs lowering.
    if host.len() > 253 {
        return Err(Refusal::BadHost);
    }
    let (mut label, mut upper) = (0usize, false);
    for &b in host.as_bytes() {
        match b {
            b'.' if label == 0 => return Err(Refusal::BadHost),
            b'.' => label = 0,
            b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' => label += 1,
            b'A'..=b'Z' => {
                label += 1;
                upper = true;
            }
            _ => return Err(Refusal::BadHost),
        }
        if label > 63 {
            return Err(Refusal::BadHost);
        }
    }
    // An empty name, or one ending in an empty label (a second trailing dot).
    if label == 0 {
        return Err(Refusal::BadHost);
    }
    Ok(if upper {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    })
}

/// The header fields and query parameters a route's keys, lists and token read. Each must
/// come at most once: a gateway reading the first and an upstream reading the last would
/// disagree on who is asking.
#[derive(Debug, Default, Clone)]
pub struct Inputs {
    headers: Vec<http::HeaderName>,
    query: Vec<String>,
}

impl Inputs {
    pub fn header(&mut self, name: http::HeaderName) {
        if !self.headers.contains(&name) {
            self.headers.push(name);
        }
    }

    pub fn query(&mut self, name: &str) {
        if !self.query.iter().any(|q| q == name) {
            self.query.push(name.to_string());
        }
    }

    /// The first input given more than once, or named in `Connection` (the gateway would
    /// read it, and strip it as hop-by-hop before the upstream could), by name.
    pub fn ambiguous(&self, headers: &http::HeaderMap, query: Option<&str>) -> Option<String> {
        for h in &self.headers {
            let mut values = headers.get_all(h).iter();
            if values.next().is_some() && values.next().is_some() {
                return Some(h.as_str().to_string());
            }
        }
        if !self.headers.is_empty() {
            for v in headers.get_all(http::header::CONNECTION) {
                let tokens = v.to_str().unwrap_or_default().split(',');
                if let Some(t) = tokens.map(str::trim).find(|t| {
                    self.headers
                        .iter()
                        .any(|h| h.as_str().eq_ignore_ascii_case(t))
                }) {
                    return Some(format!("Connection: {t}"));
                }
            }
        }
        if let (false, Some(q)) = (self.query.is_empty(), query) {
            let mut seen = vec![false; self.query.len()];
            for (name, _) in form_urlencoded::parse(q.as_bytes()) {
                if let Some(i) = self.query.iter().position(|n| *n == name) {
                    if std::mem::replace(&mut seen[i], true) {
                        return Some(format!("?{name}"));
                    }
                }
            }
        }
        None
    }
}

fn valid_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests;
