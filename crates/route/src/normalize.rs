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
use tollgate_config::EscapedSlashes;

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
    // userinfo@ never belongs in a Host header.
    if raw.contains('@') {
        return Err(Refusal::BadHost);
    }
    let host = if let Some(rest) = raw.strip_prefix('[') {
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
    } else {
        match raw.rsplit_once(':') {
            Some((h, port)) => {
                if !valid_port(port) {
                    return Err(Refusal::BadHost);
                }
                h
            }
            None => raw,
        }
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty()
        || host.len() > 253
        || host.split('.').any(|label| {
            label.is_empty()
                || label.len() > 63
                || !label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
    {
        return Err(Refusal::BadHost);
    }
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        return Ok(Cow::Owned(host.to_ascii_lowercase()));
    }
    Ok(Cow::Borrowed(host))
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
mod tests {
    use super::*;

    const NGINX: PathRules = PathRules {
        merge_slashes: true,
        escaped_slashes: EscapedSlashes::Reject,
    };

    fn n(p: &str) -> Result<String, Refusal> {
        normalize_path(p.as_bytes(), NGINX).map(Cow::into_owned)
    }

    #[test]
    fn every_spelling_of_a_path_is_one_path() {
        for p in [
            "/login",
            "//login",
            "/./login",
            "/x/../login",
            "/%6cogin",
            "/%6Cogin",
            "/%2e/login",
            "/a/%2E%2E/b/%2e%2E/x/..//login",
            "///login",
            "/a/b/../../login",
            "/.//login",
        ] {
            assert_eq!(n(p), Ok("/login".to_string()), "{p}");
        }
    }

    #[test]
    fn plain_paths_are_borrowed() {
        for p in [
            "/",
            "/api/v1/users",
            "/a-b_c~d",
            "/a.b/c.d",
            "/x/",
            "/.well-known/acme",
            "/.../x",
        ] {
            assert!(
                matches!(normalize_path(p.as_bytes(), NGINX), Ok(Cow::Borrowed(_))),
                "{p}"
            );
        }
    }

    #[test]
    fn trailing_slashes_and_root() {
        assert_eq!(n("/a/b/").as_deref(), Ok("/a/b/"));
        assert_eq!(n("/a/b//").as_deref(), Ok("/a/b/"));
        assert_eq!(n("/a/.").as_deref(), Ok("/a/"));
        assert_eq!(n("/a/..").as_deref(), Ok("/"));
        assert_eq!(n("/.").as_deref(), Ok("/"));
        assert_eq!(n("//").as_deref(), Ok("/"));
        assert_eq!(n("/...").as_deref(), Ok("/..."), "three dots is a name");
        assert_eq!(n("/.hidden").as_deref(), Ok("/.hidden"));
    }

    #[test]
    fn reserved_escapes_stay_encoded_and_upper_cased() {
        assert_eq!(n("/a%3bb").as_deref(), Ok("/a%3Bb"));
        assert_eq!(n("/a%20b").as_deref(), Ok("/a%20b"));
        assert_eq!(n("/%E2%82%ac").as_deref(), Ok("/%E2%82%AC"));
        assert_eq!(
            n("/a%25b").as_deref(),
            Ok("/a%25b"),
            "an escaped % stays one"
        );
        assert_eq!(
            n("/a%3F").as_deref(),
            Ok("/a%3F"),
            "an escaped ? is not a query"
        );
    }

    #[test]
    fn bytes_outside_ascii_are_escaped() {
        assert_eq!(n("/x/../lo\u{e9}").as_deref(), Ok("/lo%C3%A9"));
        assert_eq!(
            n("/lo\u{e9}").as_deref(),
            Ok("/lo%C3%A9"),
            "raw UTF-8 is one spelling"
        );
        assert_eq!(n("/lo%c3%a9").as_deref(), Ok("/lo%C3%A9"));
        let invalid = normalize_path(b"/a\xff", NGINX).map(Cow::into_owned);
        assert_eq!(invalid.as_deref(), Ok("/a%FF"), "invalid UTF-8 too");
    }

    #[test]
    fn what_cannot_be_made_canonical_is_refused() {
        assert_eq!(n("/.%2flogin"), Err(Refusal::EncodedSlash));
        assert_eq!(n("/a%2Fb"), Err(Refusal::EncodedSlash));
        assert_eq!(n("/a%5cb"), Err(Refusal::EncodedSlash));
        assert_eq!(n("/a\\b"), Err(Refusal::Backslash));
        assert_eq!(n("/a%00b"), Err(Refusal::Control));
        assert_eq!(n("/a%0ab"), Err(Refusal::Control));
        assert_eq!(n("/a%7f"), Err(Refusal::Control));
        assert_eq!(n("/a\tb"), Err(Refusal::Control));
        assert_eq!(n("/.."), Err(Refusal::AboveRoot));
        assert_eq!(n("/a/../../b"), Err(Refusal::AboveRoot));
        assert_eq!(n("/%2e%2e/etc/passwd"), Err(Refusal::AboveRoot));
        assert_eq!(n("/a%zz"), Err(Refusal::BadEscape));
        assert_eq!(n("/a%4"), Err(Refusal::BadEscape));
        assert_eq!(n("/a%"), Err(Refusal::BadEscape));
        assert_eq!(n("*"), Err(Refusal::NotAbsolute));
    }

    #[test]
    fn escaped_slashes_kept_or_decoded() {
        let keep = PathRules {
            merge_slashes: true,
            escaped_slashes: EscapedSlashes::Keep,
        };
        let decode = PathRules {
            merge_slashes: true,
            escaped_slashes: EscapedSlashes::Decode,
        };
        assert_eq!(normalize_path(b"/a%2fb", keep).as_deref(), Ok("/a%2Fb"));
        assert_eq!(normalize_path(b"/a%5cb", keep).as_deref(), Ok("/a%5Cb"));
        assert_eq!(
            normalize_path(b"/.%2flogin", keep).as_deref(),
            Ok("/.%2Flogin")
        );
        assert_eq!(
            normalize_path(b"/.%2flogin", decode).as_deref(),
            Ok("/login")
        );
        assert_eq!(
            normalize_path(b"/a%5c..%5clogin", decode).as_deref(),
            Ok("/login")
        );
        assert_eq!(
            normalize_path(b"/%2e%2e%2fetc", decode),
            Err(Refusal::AboveRoot)
        );
    }

    #[test]
    fn unmerged_slashes_stay() {
        let keep = PathRules {
            merge_slashes: false,
            escaped_slashes: EscapedSlashes::Reject,
        };
        assert_eq!(normalize_path(b"//a//b", keep).as_deref(), Ok("//a//b"));
        assert_eq!(normalize_path(b"//a/./b", keep).as_deref(), Ok("//a/b"));
    }

    #[test]
    fn canonical_paths_are_fixed_points() {
        for p in ["/a%3Bb", "/login/", "/%E2%82%AC", "/a/b"] {
            let once = n(p).unwrap_or_default();
            assert_eq!(n(&once), Ok(once.clone()), "{p}");
        }
    }

    #[test]
    fn inputs_given_twice_are_ambiguous() {
        let mut i = Inputs::default();
        i.header(http::HeaderName::from_static("x-api-key"));
        i.query("api_key");
        let mut h = http::HeaderMap::new();
        h.append("x-api-key", http::HeaderValue::from_static("a"));
        h.append("x-other", http::HeaderValue::from_static("1"));
        h.append("x-other", http::HeaderValue::from_static("2"));
        assert_eq!(i.ambiguous(&h, Some("api_key=a&x=1&x=2")), None);
        assert_eq!(
            i.ambiguous(&h, Some("api_key=a&%61pi_key=b")).as_deref(),
            Some("?api_key"),
            "names are compared decoded"
        );
        let mut hop = h.clone();
        hop.append(
            "connection",
            http::HeaderValue::from_static("keep-alive, X-API-Key"),
        );
        assert_eq!(
            i.ambiguous(&hop, None).as_deref(),
            Some("Connection: X-API-Key")
        );
        h.append("X-Api-Key", http::HeaderValue::from_static("b"));
        assert_eq!(i.ambiguous(&h, None).as_deref(), Some("x-api-key"));
    }

    #[test]
    fn hosts() {
        let h = |s: &str| normalize_host(s).map(Cow::into_owned);
        assert_eq!(h("api.example.com").as_deref(), Ok("api.example.com"));
        assert_eq!(h("API.Example.COM").as_deref(), Ok("api.example.com"));
        assert_eq!(h("api.example.com.").as_deref(), Ok("api.example.com"));
        assert_eq!(h("api.example.com.:8080").as_deref(), Ok("api.example.com"));
        assert_eq!(h("api.example.com:443").as_deref(), Ok("api.example.com"));
        assert_eq!(h("[::1]:80").as_deref(), Ok("::1"));
        assert_eq!(h("[0::1]").as_deref(), Ok("::1"));
        assert_eq!(h("127.0.0.1:8080").as_deref(), Ok("127.0.0.1"));
        for bad in [
            "",
            ".",
            "api.example.com..",
            "a..b",
            "a b",
            "a/b",
            "user@host",
            "host:port",
            "host:",
            "[::1",
            "[::1]x",
            "[zz]",
            "a\\b",
            "host:123456",
        ] {
            assert_eq!(h(bad), Err(Refusal::BadHost), "{bad:?}");
        }
    }
}
