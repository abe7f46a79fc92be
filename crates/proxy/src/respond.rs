//! Answers made at the edge: problem+json bodies (RFC 9457) and the IETF RateLimit fields
//! (draft-ietf-httpapi-ratelimit-headers, Structured Fields syntax).

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use std::fmt::Write;

/// The problems Tollgate answers with itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    RateLimited,
    NoRoute,
    BadRequest,
    UpstreamUnavailable,
    UpstreamTimeout,
    Internal,
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
        }
    }

    /// The problem+json body. `extra` members are added after the standard ones.
    pub fn body(
        &self,
        detail: &str,
        request_id: &str,
        extra: &[(&str, serde_json::Value)],
    ) -> Bytes {
        let (slug, title, code) = self.parts();
        let mut m = serde_json::Map::with_capacity(6 + extra.len());
        m.insert("type".into(), format!("urn:tollgate:problem:{slug}").into());
        m.insert("title".into(), title.into());
        m.insert("status".into(), self.status().into());
        m.insert("detail".into(), detail.into());
        m.insert("error_code".into(), code.into());
        m.insert("request_id".into(), request_id.into());
        for (k, v) in extra {
            m.insert((*k).into(), v.clone());
        }
        Bytes::from(serde_json::Value::Object(m).to_string())
    }
}

/// A response header for an edge answer with its body length and content type set.
pub fn header(
    status: u16,
    content_type: &str,
    len: usize,
    request_id: &str,
) -> Result<ResponseHeader> {
    let mut h = ResponseHeader::build(status, Some(6))?;
    h.insert_header(http::header::CONTENT_TYPE, content_type)?;
    h.insert_header(http::header::CONTENT_LENGTH, len)?;
    h.insert_header("x-request-id", request_id)?;
    h.insert_header(http::header::CACHE_CONTROL, "no-store")?;
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

/// `"name";r=R;t=T` for RateLimit.
pub fn ratelimit_value(name_sf: &str, remaining: u64, reset_secs: u64) -> String {
    let mut s = String::with_capacity(name_sf.len() + 24);
    let _ = write!(s, "{name_sf};r={remaining};t={reset_secs}");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_bodies_follow_the_contract() {
        let b = Problem::RateLimited.body("slow down", "abc", &[("limit", "per_ip".into())]);
        let v: serde_json::Value = serde_json::from_slice(&b).expect("json");
        assert_eq!(v["status"], 429);
        assert_eq!(v["error_code"], "RATE_LIMIT_EXCEEDED");
        assert_eq!(v["request_id"], "abc");
        assert_eq!(v["title"], "Too Many Requests");
        assert!(v["type"]
            .as_str()
            .is_some_and(|t| t.starts_with("urn:tollgate:problem:")));
        assert_eq!(v["limit"], "per_ip");
    }

    #[test]
    fn structured_field_strings_are_escaped() {
        assert_eq!(sf_string("per_ip"), "\"per_ip\"");
        assert_eq!(sf_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(policy_item("\"x\"", 10, 1), "\"x\";q=10;w=1");
        assert_eq!(ratelimit_value("\"x\"", 7, 1), "\"x\";r=7;t=1");
    }
}
