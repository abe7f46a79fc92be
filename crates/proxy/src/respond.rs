//! Answers made at the edge: problem+json bodies (RFC 9457) and the IETF RateLimit fields
//! (draft-ietf-httpapi-ratelimit-headers, Structured Fields syntax).

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use std::io::Write;

/// The problems Tollgate answers with itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    RateLimited,
    NoRoute,
    BadRequest,
    UpstreamUnavailable,
    UpstreamTimeout,
    Internal,
    /// A global limit could not be decided (Redis away) and its `on_error` is `closed`.
    LimiterUnavailable,
    /// A bearer token on a route keyed by its claims did not verify.
    InvalidToken,
    /// A calendar quota is used up for its period.
    QuotaExceeded,
    /// A body read for `body:FIELD` keys is larger than the route reads.
    PayloadTooLarge,
    /// An access list refuses the client.
    AccessDenied,
    /// A limit's escalation ladder blocked the client's key for a while.
    TemporarilyBlocked,
    /// Over a limit whose action is `challenge`: prove you are human at `challenge_url`.
    ChallengeRequired,
    /// A header (or query parameter) that feeds a key, a list or a token was given twice: the
    /// gateway and the upstream could read different ones.
    AmbiguousRequest,
    /// The request head did not arrive within `header_timeout`.
    RequestTimeout,
    /// The request head is over `max_header_bytes` or `max_headers`.
    HeaderFieldsTooLarge,
}

impl Problem {
    pub fn status(&self) -> u16 {
        match self {
            Problem::RateLimited => 429,
            Problem::NoRoute => 404,
            Problem::BadRequest => 400,
            Problem::UpstreamUnavailable => 502,
            Problem::UpstreamTimeout => 504,
            Problem::Internal => 500,
            Problem::LimiterUnavailable => 503,
            Problem::InvalidToken => 401,
            Problem::QuotaExceeded => 429,
            Problem::PayloadTooLarge => 413,
            Problem::AccessDenied => 403,
            Problem::TemporarilyBlocked => 403,
            Problem::ChallengeRequired => 429,
            Problem::AmbiguousRequest => 400,
            Problem::RequestTimeout => 408,
            Problem::HeaderFieldsTooLarge => 431,
        }
    }

    fn parts(&self) -> (&'static str, &'static str, &'static str) {
        match self {
            Problem::RateLimited => (
                "rate-limit-exceeded",
                "Too Many Requests",
                "RATE_LIMIT_EXCEEDED",
            ),
            Problem::NoRoute => ("no-route", "Not Found", "NO_ROUTE"),
            Problem::BadRequest => ("bad-request", "Bad Request", "BAD_REQUEST"),
            Problem::UpstreamUnavailable => (
                "upstream-unavailable",
                "Bad Gateway",
                "UPSTREAM_UNAVAILABLE",
            ),
            Problem::UpstreamTimeout => ("upstream-timeout", "Gateway Timeout", "UPSTREAM_TIMEOUT"),
            Problem::Internal => ("internal", "Internal Server Error", "INTERNAL_ERROR"),
            Problem::LimiterUnavailable => (
                "limiter-unavailable",
                "Service Unavailable",
                "RATE_LIMITER_UNAVAILABLE",
            ),
            Problem::InvalidToken => ("invalid-token", "Unauthorized", "INVALID_TOKEN"),
            Problem::QuotaExceeded => ("quota-exceeded", "Too Many Requests", "QUOTA_EXCEEDED"),
            Problem::PayloadTooLarge => (
                "payload-too-large",
                "Content Too Large",
                "PAYLOAD_TOO_LARGE",
            ),
            Problem::AccessDenied => ("access-denied", "Forbidden", "ACCESS_DENIED"),
            Problem::TemporarilyBlocked => {
                ("temporarily-blocked", "Forbidden", "TEMPORARILY_BLOCKED")
            }
            Problem::ChallengeRequired => (
                "challenge-required",
                "Too Many Requests",
                "CHALLENGE_REQUIRED",
            ),
            Problem::AmbiguousRequest => ("ambiguous-request", "Bad Request", "AMBIGUOUS_REQUEST"),
            Problem::RequestTimeout => ("request-timeout", "Request Timeout", "REQUEST_TIMEOUT"),
            Problem::HeaderFieldsTooLarge => (
                "header-fields-too-large",
                "Request Header Fields Too Large",
                "HEADER_FIELDS_TOO_LARGE",
            ),
        }
    }

    /// The problem+json body. `extra` members are added after the standard ones. Written
    /// straight into one buffer (no JSON tree): this is the body of every 429.
    pub fn body(&self, detail: &str, request_id: &str, extra: &[(&str, Extra)]) -> Bytes {
        let (slug, title, code) = self.parts();
        let mut out = Vec::with_capacity(256 + detail.len());
        out.extend_from_slice(b"{\"type\":\"urn:tollgate:problem:");
        out.extend_from_slice(slug.as_bytes());
        out.extend_from_slice(b"\",\"title\":\"");
        out.extend_from_slice(title.as_bytes());
        let _ = write!(out, "\",\"status\":{},\"detail\":", self.status());
        json_str(&mut out, detail);
        out.extend_from_slice(b",\"error_code\":\"");
        out.extend_from_slice(code.as_bytes());
        out.extend_from_slice(b"\",\"request_id\":");
        json_str(&mut out, request_id);
        for (k, v) in extra {
            out.push(b',');
            json_str(&mut out, k);
            out.push(b':');
            match v {
                Extra::Str(s) => json_str(&mut out, s),
                Extra::Int(n) => {
                    let _ = write!(out, "{n}");
                }
            }
        }
        out.push(b'}');
        Bytes::from(out)
    }
}

/// An extra member of a problem body.
#[derive(Debug, Clone, Copy)]
pub enum Extra<'a> {
    Str(&'a str),
    Int(u64),
}

/// Appends `s` as a JSON string literal.
fn json_str(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// A response header for an edge answer with its body length and content type set.
pub fn header(
    status: u16,
    content_type: &'static str,
    len: usize,
    request_id: &http::HeaderValue,
) -> Result<ResponseHeader> {
    let mut h = ResponseHeader::build(status, Some(8))?;
    h.insert_header(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    )?;
    h.insert_header(http::header::CONTENT_LENGTH, len)?;
    h.insert_header("x-request-id", request_id.clone())?;
    h.insert_header(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    )?;
    Ok(h)
}

/// Quotes a policy name as a Structured Fields string.
pub fn sf_string(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 2);
    s.push('"');
    for c in name.chars() {
        if c == '"' || c == '\\' {
            s.push('\\');
        }
        if (' '..='~').contains(&c) {
            s.push(c);
        }
    }
    s.push('"');
    s
}

/// `"name";q=Q;w=W` for RateLimit-Policy.
pub fn policy_item(name_sf: &str, quota: u64, window_secs: u64) -> String {
    format!("{name_sf};q={quota};w={window_secs}")
}

/// `"name";r=R;t=T` for RateLimit, as a header value built in place.
pub fn ratelimit_value(
    name_sf: &str,
    remaining: u64,
    reset_secs: u64,
) -> Option<http::HeaderValue> {
    let mut v = Vec::with_capacity(name_sf.len() + 24);
    let _ = write!(v, "{name_sf};r={remaining};t={reset_secs}");
    http::HeaderValue::from_maybe_shared(Bytes::from(v)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_bodies_follow_the_contract() {
        let b = Problem::RateLimited.body(
            "say \"slow\"",
            "abc",
            &[
                ("limit", Extra::Str("per_ip")),
                ("retry_after", Extra::Int(3)),
            ],
        );
        let v: serde_json::Value = serde_json::from_slice(&b).expect("json");
        assert_eq!(v["status"], 429);
        assert_eq!(v["error_code"], "RATE_LIMIT_EXCEEDED");
        assert_eq!(v["request_id"], "abc");
        assert_eq!(v["title"], "Too Many Requests");
        assert!(v["type"]
            .as_str()
            .is_some_and(|t| t.starts_with("urn:tollgate:problem:")));
        assert_eq!(v["limit"], "per_ip");
        assert_eq!(v["retry_after"], 3);
        assert_eq!(v["detail"], "say \"slow\"");
        let keys: Vec<_> = v
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        assert_eq!(
            keys,
            [
                "type",
                "title",
                "status",
                "detail",
                "error_code",
                "request_id",
                "limit",
                "retry_after"
            ]
        );
    }

    #[test]
    fn structured_field_strings_are_escaped() {
        assert_eq!(sf_string("per_ip"), "\"per_ip\"");
        assert_eq!(sf_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(policy_item("\"x\"", 10, 1), "\"x\";q=10;w=1");
        assert_eq!(
            ratelimit_value("\"x\"", 7, 1)
                .as_ref()
                .and_then(|v| v.to_str().ok()),
            Some("\"x\";r=7;t=1")
        );
    }
}
