//! Reading the request, as the stages, phases and tools share it: its canonical target and
//! host (or the 400 that says why not), whether it came over TLS, the HTTPS redirect's
//! location, its declared body length and the body `body:FIELD` keys read, the client's
//! address as X-Forwarded-For writes it, the variables header rules read, and whether a
//! downstream error means the client left.

use crate::runtime::Runtime;
use http::HeaderValue;
use pingora::http::RequestHeader;
use pingora::prelude::*;
use pingora::protocols::http::authority::{
    is_http_family_scheme, raw_target_authority, RawTargetAuthority,
};
use std::borrow::Cow;
use std::io::Write;
use std::net::IpAddr;
use tollgate_core::client_ip::trusted;
use tollgate_core::respond::{names, Problem};
use tollgate_route::normalize::{normalize_host, normalize_path, PathRules, Refusal};

/// A downstream error that says the client left or stopped reading (past `send_timeout`):
/// nothing more can reach it.
pub(crate) fn client_gone(t: &ErrorType) -> bool {
    matches!(
        t,
        ErrorType::WriteError
            | ErrorType::WriteTimedout
            | ErrorType::ReadError
            | ErrorType::ConnectionClosed
    )
}

/// Appends `ip` as text (X-Forwarded-For): IPv4 by hand, the common case on every proxied
/// request; IPv6 through its `Display`.
pub(crate) fn push_ip(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            let mut digits = itoa::Buffer::new();
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                out.extend_from_slice(digits.format(octet).as_bytes());
            }
        }
        IpAddr::V6(_) => {
            let _ = write!(out, "{ip}");
        }
    }
}

/// The request's declared body length: `None` without `Content-Length`, `Some(None)` when it
/// is not one number (Pingora refuses those before any phase; kept for safety), else the length.
/// Read as Pingora frames the body: identical values, in several fields or a comma list
/// (`5, 5`), are that one length (RFC 9110 section 8.6), so a limit reads the length the
/// upstream is sent.
pub(crate) fn declared_length(req: &pingora::http::RequestHeader) -> Option<Option<u64>> {
    let mut fields = req
        .headers
        .get_all(http::header::CONTENT_LENGTH)
        .iter()
        .peekable();
    fields.peek()?;
    let mut length = None;
    for value in fields {
        for piece in value.as_bytes().split(|&b| b == b',') {
            let digits = piece.trim_ascii();
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return Some(None);
            }
            let Some(n) = std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse::<u64>().ok())
            else {
                return Some(None);
            };
            match length {
                None => length = Some(n),
                Some(prev) if prev != n => return Some(None),
                Some(_) => {}
            }
        }
    }
    Some(length)
}

/// Reads the request body for `body:FIELD` keys, at most `limit` bytes, keeping it for the
/// upstream (Pingora's retry buffer replays what was read: the upstream receives the exact
/// body). Too large: 413; a JSON body that does not parse: 400; no body, or a content type
/// without fields: no fields (those limits do not count the request).
pub(crate) async fn read_key_body(
    session: &mut Session,
    limit: usize,
) -> std::result::Result<Option<crate::limits::identity::ParsedBody>, (Problem, &'static str)> {
    let req = session.req_header();
    let declared = declared_length(req).flatten();
    if declared.is_some_and(|n| n > limit as u64) {
        return Err((
            Problem::PayloadTooLarge,
            "the request body is larger than this route reads",
        ));
    }
    let content_type = req
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if session.is_body_done() || declared == Some(0) {
        return Ok(None);
    }
    session.as_mut().enable_retry_buffering();
    let mut buf = Vec::with_capacity(declared.unwrap_or(1024).min(limit as u64) as usize);
    let read = async {
        while let Some(chunk) = session.read_request_body().await? {
            buf.extend_from_slice(&chunk);
            if buf.len() > limit {
                return Ok::<bool, Box<Error>>(false);
            }
        }
        Ok(true)
    };
    match tokio::time::timeout(std::time::Duration::from_secs(10), read).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => {
            return Err((
                Problem::PayloadTooLarge,
                "the request body is larger than this route reads",
            ))
        }
        Ok(Err(e)) if e.etype() == &ErrorType::ReadTimedout => {
            return Err((
                Problem::RequestTimeout,
                "the request body did not arrive in time (body_timeout)",
            ))
        }
        Err(_) => {
            return Err((
                Problem::RequestTimeout,
                "the request body did not arrive in time",
            ))
        }
        _ => return Err((Problem::BadRequest, "the request body could not be read")),
    }
    crate::limits::identity::ParsedBody::parse(&content_type, &buf)
        .map_err(|why| (Problem::BadRequest, why))
}

/// What a request asked for, in canonical spellings ([`tollgate_route::normalize`]).
pub(crate) struct Target<'r> {
    pub host: Option<Cow<'r, str>>,
    pub path: Cow<'r, str>,
    /// The upstream must be sent another target: the canonical path differs from the one
    /// sent, or the target was in absolute form.
    pub rewrite: bool,
    /// An absolute-form target's authority, as sent (the upstream's Host when it had none).
    pub authority: Option<&'r str>,
}

/// The request came over TLS: to this process, or to a trusted proxy that says so
/// (`X-Forwarded-Proto: https`; no redirect loop behind a load balancer that ends TLS).
pub(crate) fn is_secure(session: &Session, peer: IpAddr, rt: &Runtime) -> bool {
    if session.digest().is_some_and(|d| d.ssl_digest.is_some()) {
        return true;
    }
    trusted(peer, &rt.trusted_proxies)
        && forwarded_https(
            session
                .req_header()
                .headers
                .get(names::X_FORWARDED_PROTO.name()),
        )
}

/// `X-Forwarded-Proto` says https. Proxies in a chain append, so the first value (of the
/// first field) is what the client used.
pub(crate) fn forwarded_https(value: Option<&HeaderValue>) -> bool {
    value
        .and_then(|v| v.as_bytes().split(|&b| b == b',').next())
        .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"https"))
}

/// `https://HOST[:PORT]PATH[?QUERY]` from the canonical host and path (both already checked:
/// no byte of them can end the header), `None` without a host. `drop_slash`: one trailing
/// `/` of the path and query left out, as ingress-nginx's redirect does (`/a/` to `/a`,
/// `/` to nothing).
pub(crate) fn https_location(
    host: Option<&str>,
    path: &str,
    query: Option<&str>,
    port: Option<u16>,
    drop_slash: bool,
) -> Option<HeaderValue> {
    let host = host?;
    let mut s = String::with_capacity(16 + host.len() + path.len());
    s.push_str("https://");
    if host.contains(':') && !host.starts_with('[') {
        s.push('[');
        s.push_str(host);
        s.push(']');
    } else {
        s.push_str(host);
    }
    if let Some(p) = port {
        s.push(':');
        s.push_str(&p.to_string());
    }
    s.push_str(path);
    if let Some(q) = query {
        s.push('?');
        // The query as sent, but a Location header is ASCII: other bytes are escaped.
        for c in q.chars() {
            if c.is_ascii() {
                s.push(c);
            } else {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    s.push_str(&format!("%{b:02X}"));
                }
            }
        }
    }
    if drop_slash && s.ends_with('/') {
        s.pop();
    }
    HeaderValue::from_str(&s).ok()
}

/// The request's target and host made canonical, or the 400 that refuses them. The target is
/// read as the client sent it (`raw_path`), never through a parser's repair: an origin-form
/// path, or an absolute-form `http(s)://authority/path` (or ws, wss: Pingora's HTTP family,
/// as Pingora classified it); anything else is refused. The host is h2's `:authority`, an
/// absolute target's authority, or else the one Host header; two Host headers are ambiguous.
pub(crate) fn canonical_target(
    req: &RequestHeader,
    rules: PathRules,
) -> std::result::Result<Target<'_>, (Problem, &'static str)> {
    let bad = |r: Refusal| (Problem::BadRequest, r.detail());
    // Pingora's own classifier, so the authority is the one it checked against Host.
    let raw = req.raw_path();
    let until_query = |b: &'_ [u8]| b.iter().position(|&c| c == b'?').unwrap_or(b.len());
    let (path, authority) = match raw_target_authority(raw) {
        _ if raw.first() == Some(&b'/') => (&raw[..until_query(raw)], None),
        RawTargetAuthority::Absolute {
            scheme,
            authority,
            path_and_query,
        } if is_http_family_scheme(scheme) => {
            let authority = std::str::from_utf8(authority).map_err(|_| bad(Refusal::BadHost))?;
            let path = &path_and_query[..until_query(path_and_query)];
            (
                if path.is_empty() { &b"/"[..] } else { path },
                Some(authority),
            )
        }
        _ => return Err(bad(Refusal::NotAbsolute)),
    };
    let mut hosts = req.headers.get_all(http::header::HOST).iter();
    let header = hosts.next();
    if hosts.next().is_some() {
        return Err((
            Problem::AmbiguousRequest,
            "The Host header is given more than once.",
        ));
    }
    let raw_host = match (req.uri.authority(), authority, header) {
        (Some(a), _, _) => Some(a.as_str()),
        (None, Some(a), _) => Some(a),
        (None, None, Some(h)) => Some(h.to_str().map_err(|_| bad(Refusal::BadHost))?),
        (None, None, None) => None,
    };
    let host = match raw_host.filter(|h| !h.is_empty()) {
        Some(h) => Some(normalize_host(h).map_err(bad)?),
        None => None,
    };
    let canonical = normalize_path(path, rules).map_err(bad)?;
    let rewrite = authority.is_some() || canonical.as_bytes() != path;
    Ok(Target {
        host,
        path: canonical,
        rewrite,
        authority,
    })
}

/// What a header rule's variables read, for this request.
pub(crate) fn vars<'a>(
    ctx: &'a crate::ctx::Ctx,
    session: &'a pingora::proxy::Session,
) -> tollgate_core::filters::headers::Vars<'a> {
    let req = session.req_header();
    let (route, proxies) = match (&ctx.rt, ctx.route) {
        (Some(rt), Some(r)) => (&*rt.routes[r].name, &rt.trusted_proxies[..]),
        _ => ("", &[][..]),
    };
    tollgate_core::filters::headers::Vars {
        client_ip: match ctx.client {
            Some(ip) => tollgate_core::filters::headers::ClientIp::Known(ip),
            None => tollgate_core::filters::headers::ClientIp::Through {
                peer: ctx.peer,
                req,
                proxies,
            },
        },
        request_id: &ctx.request_id,
        req: Some(req),
        route,
        secure: ctx.secure,
    }
}

#[cfg(test)]
mod tests {
    use super::{forwarded_https, https_location, push_ip};
    use http::HeaderValue;

    /// X-Forwarded-For's address is the one `Display` writes, for every kind of address.
    #[test]
    fn forwarded_for_addresses_are_written_as_display_writes_them() {
        for ip in [
            "0.0.0.0",
            "127.0.0.1",
            "10.200.3.45",
            "255.255.255.255",
            "::1",
            "2001:db8::8a2e:370:7334",
            "::ffff:192.0.2.1",
            "fe80::1",
        ] {
            let ip: std::net::IpAddr = ip.parse().expect("address");
            let mut out = b"a, ".to_vec();
            push_ip(&mut out, ip);
            assert_eq!(out, format!("a, {ip}").into_bytes());
        }
    }

    #[test]
    fn forwarded_proto_spellings() {
        let says = |v: &str| forwarded_https(Some(&HeaderValue::from_str(v).expect("a value")));
        for yes in ["https", "HTTPS", " https ", "https, http", "https,http"] {
            assert!(says(yes), "{yes:?}");
        }
        for no in [
            "http",
            "http, https",
            "",
            "httpsx",
            "h ttps",
            ",https",
            "wss",
        ] {
            assert!(!says(no), "{no:?}");
        }
        assert!(!forwarded_https(None));
    }

    #[test]
    fn redirect_locations() {
        let loc = |h: Option<&str>, p: &str, q: Option<&str>, port: Option<u16>| {
            https_location(h, p, q, port, false).map(|v| v.to_str().map(str::to_string).ok())
        };
        let dropped = |p: &str, q: Option<&str>| {
            https_location(Some("a.test"), p, q, None, true)
                .and_then(|v| v.to_str().map(str::to_string).ok())
        };
        // ingress-nginx's: the last byte of the path and query, when it is a `/`.
        assert_eq!(dropped("/a/", None).as_deref(), Some("https://a.test/a"));
        assert_eq!(dropped("/", None).as_deref(), Some("https://a.test"));
        assert_eq!(
            dropped("/a/", Some("x=1")).as_deref(),
            Some("https://a.test/a/?x=1")
        );
        assert_eq!(
            dropped("/a", Some("next=/")).as_deref(),
            Some("https://a.test/a?next=")
        );
        assert_eq!(dropped("/a", None).as_deref(), Some("https://a.test/a"));
        assert_eq!(
            loc(Some("a.test"), "/x", Some("q=1"), Some(8443)),
            Some(Some("https://a.test:8443/x?q=1".into()))
        );
        assert_eq!(
            loc(Some("a.test"), "/", None, None),
            Some(Some("https://a.test/".into()))
        );
        // An IPv6 literal gets its brackets; a query outside ASCII is escaped, byte by byte.
        assert_eq!(
            loc(Some("::1"), "/", Some("q=é"), None),
            Some(Some("https://[::1]/?q=%C3%A9".into()))
        );
        assert_eq!(
            loc(Some("[::1]"), "/p", None, Some(1)),
            Some(Some("https://[::1]:1/p".into()))
        );
        // No host: nothing to redirect to.
        assert_eq!(loc(None, "/", None, None), None);
    }
}
