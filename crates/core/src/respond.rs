//! Answers made at the edge: problem+json bodies (RFC 9457) and the IETF RateLimit fields
//! (draft-ietf-httpapi-ratelimit-headers, Structured Fields syntax).

use bytes::Bytes;
use pingora::http::{ResponseHeader, StaticHeaderName};
use pingora::prelude::*;
use std::io::Write;

/// The header names Tollgate writes (and reads) on every request, checked at compile time:
/// inserting one neither parses nor allocates its name (vendor patch 0010).
pub mod names {
    use pingora::http::StaticHeaderName as N;

    pub const X_REQUEST_ID: N = N::new("x-request-id");
    pub const X_FORWARDED_FOR: N = N::new("x-forwarded-for");
    pub const X_FORWARDED_PROTO: N = N::new("x-forwarded-proto");
    /// Told to the upstream when a shadow-mode limit would have refused.
    pub const SHADOW_EXCEEDED: N = N::new("x-ratelimit-shadow-exceeded");
    pub const RATELIMIT: N = N::new("ratelimit");
    pub const RATELIMIT_POLICY: N = N::new("ratelimit-policy");
    pub const X_RATELIMIT_LIMIT: N = N::new("x-ratelimit-limit");
    pub const X_RATELIMIT_REMAINING: N = N::new("x-ratelimit-remaining");
    pub const X_RATELIMIT_RESET: N = N::new("x-ratelimit-reset");
    pub const X_QUOTA_WARNING: N = N::new("x-quota-warning");
    pub const RETRY_AFTER: N = N::new("retry-after");
    pub const CONTENT_TYPE: N = N::new("content-type");
    pub const CONTENT_LENGTH: N = N::new("content-length");
    pub const CACHE_CONTROL: N = N::new("cache-control");
    pub const CONNECTION: N = N::new("connection");
    pub const LOCATION: N = N::new("location");
    pub const WWW_AUTHENTICATE: N = N::new("www-authenticate");
    pub const SET_COOKIE: N = N::new("set-cookie");
    pub const STRICT_TRANSPORT_SECURITY: N = N::new("strict-transport-security");
    pub const X_FORWARDED_PREFIX: N = N::new("x-forwarded-prefix");
    /// ingress-nginx's client-certificate fields toward the upstream (`client_cert_headers`).
    pub const SSL_CLIENT_VERIFY: N = N::new("ssl-client-verify");
    pub const SSL_CLIENT_SUBJECT_DN: N = N::new("ssl-client-subject-dn");
    pub const SSL_CLIENT_ISSUER_DN: N = N::new("ssl-client-issuer-dn");
    pub const SSL_CLIENT_CERT: N = N::new("ssl-client-cert");
    pub const TRACEPARENT: N = N::new("traceparent");
    pub const TRACESTATE: N = N::new("tracestate");
    pub const VARY: N = N::new("vary");
    pub const ACAO: N = N::new("access-control-allow-origin");
    pub const ACAC: N = N::new("access-control-allow-credentials");
    pub const ACAM: N = N::new("access-control-allow-methods");
    pub const ACAH: N = N::new("access-control-allow-headers");
    pub const ACEH: N = N::new("access-control-expose-headers");
    pub const ACMA: N = N::new("access-control-max-age");
}

/// The problems Tollgate answers with itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    RateLimited,
    NoRoute,
    BadRequest,
    UpstreamUnavailable,
    /// No address to send to: the upstream's names do not resolve (yet).
    UpstreamUnresolved,
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
    /// Over the route's `max_body_bytes`.
    BodyTooLarge,
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
    /// A route's auth wants credentials the request lacks or that do not verify (basic,
    /// API key, an auth service's 401).
    Unauthenticated,
    /// A verified token lacks a claim the route's auth requires.
    InsufficientScope,
    /// The route's auth service refused the request (its 403).
    Forbidden,
    /// The route's auth service did not answer in time, or could not be reached: nothing
    /// passes.
    AuthUnavailable,
    /// The route's auth service answered something other than 2xx, 401 or 403.
    AuthFailed,
}

impl Problem {
    pub fn status(&self) -> u16 {
        match self {
            Problem::RateLimited => 429,
            Problem::NoRoute => 404,
            Problem::BadRequest => 400,
            Problem::UpstreamUnavailable => 502,
            Problem::UpstreamUnresolved => 503,
            Problem::UpstreamTimeout => 504,
            Problem::Internal => 500,
            Problem::LimiterUnavailable => 503,
            Problem::InvalidToken => 401,
            Problem::QuotaExceeded => 429,
            Problem::PayloadTooLarge | Problem::BodyTooLarge => 413,
            Problem::AccessDenied => 403,
            Problem::TemporarilyBlocked => 403,
            Problem::ChallengeRequired => 429,
            Problem::AmbiguousRequest => 400,
            Problem::RequestTimeout => 408,
            Problem::HeaderFieldsTooLarge => 431,
            Problem::Unauthenticated => 401,
            Problem::InsufficientScope => 403,
            Problem::Forbidden => 403,
            Problem::AuthUnavailable => 503,
            Problem::AuthFailed => 500,
        }
    }

    /// The machine-readable code (`RATE_LIMIT_EXCEEDED`), as the problem's `code` field.
    pub fn code(&self) -> &'static str {
        self.parts().2
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
            Problem::UpstreamUnresolved => (
                "upstream-unavailable",
                "Service Unavailable",
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
            Problem::BodyTooLarge => ("body-too-large", "Content Too Large", "BODY_TOO_LARGE"),
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
            Problem::Unauthenticated => ("unauthenticated", "Unauthorized", "UNAUTHENTICATED"),
            Problem::InsufficientScope => ("insufficient-scope", "Forbidden", "INSUFFICIENT_SCOPE"),
            Problem::Forbidden => ("forbidden", "Forbidden", "FORBIDDEN"),
            Problem::AuthUnavailable => (
                "auth-unavailable",
                "Service Unavailable",
                "AUTH_UNAVAILABLE",
            ),
            Problem::AuthFailed => ("auth-failed", "Internal Server Error", "AUTH_FAILED"),
        }
    }

    /// The problem+json body. `extra` members are added after the standard ones. Written
    /// straight into one buffer (no JSON tree), by the same writer as [`Problem::template`].
    pub fn body(&self, detail: &str, request_id: &str, extra: &[(&str, Extra)]) -> Bytes {
        let extra = extra.iter().map(|&(k, v)| match v {
            Extra::Str(s) => (k, Piece::Text(s)),
            Extra::Int(n) => (k, Piece::Int(n)),
        });
        let r = self.render(&[Piece::Text(detail)], Some(request_id), extra);
        debug_assert!(r.holes.is_empty());
        Bytes::from(r.cur)
    }

    /// Writes the body: the request id as given, or a hole for it when `None`.
    fn render<'a>(
        &self,
        detail: &[Piece],
        request_id: Option<&str>,
        extra: impl Iterator<Item = (&'a str, Piece<'a>)>,
    ) -> Render {
        let (slug, title, code) = self.parts();
        let mut r = Render {
            lits: Vec::new(),
            holes: Vec::new(),
            cur: Vec::with_capacity(256),
        };
        let _ = write!(
            r.cur,
            "{{\"type\":\"urn:tollgate:problem:{slug}\",\"title\":\"{title}\",\"status\":{},\"detail\":",
            self.status()
        );
        r.string(detail);
        let _ = write!(r.cur, ",\"error_code\":\"{code}\",\"request_id\":");
        r.string(&[request_id.map_or(Piece::Hole(Hole::RequestId), Piece::Text)]);
        for (k, v) in extra {
            r.cur.push(b',');
            json_str(&mut r.cur, k);
            r.cur.push(b':');
            match v {
                Piece::Hole(Hole::Secs) => r.hole(Hole::Secs),
                Piece::Int(n) => r
                    .cur
                    .extend_from_slice(itoa::Buffer::new().format(n).as_bytes()),
                other => r.string(&[other]),
            }
        }
        r.cur.push(b'}');
        r
    }

    /// The body as a [`Template`]: `detail` and the string extras may hold holes; an extra
    /// that is a lone [`Hole::Secs`] is a JSON number (as [`Extra::Int`] writes it).
    pub fn template(&self, detail: &[Piece], extra: &[(&str, Piece)]) -> Template {
        let r = self.render(detail, None, extra.iter().copied());
        let mut lits = r.lits;
        lits.push(r.cur.into_boxed_slice());
        let len = lits.iter().map(|l| l.len()).sum();
        Template {
            lits,
            holes: r.holes,
            len,
        }
    }
}

/// A limit's 429 body, rendered when the config loads: the challenge shape for a limit whose
/// action is `challenge` (with its `challenge_url`), the quota shape for a quota (with its
/// `upgrade_url` when set), the rate-limit shape otherwise. Filled in per refusal with the
/// wait (Retry-After's seconds) and the request id.
pub fn refusal(cfg: &tollgate_config::model::LimitConfig, quota: bool) -> Template {
    use Piece::{Hole as H, Text as T};
    let name = cfg.name.as_str();
    let secs = ("retry_after", H(Hole::Secs));
    if let (tollgate_config::model::Action::Challenge, Some(url)) = (cfg.action, &cfg.challenge_url)
    {
        let detail = format!(
            "Too many requests under \"{name}\": solve the challenge at challenge_url to continue."
        );
        return Problem::ChallengeRequired.template(
            &[T(&detail)],
            &[("limit", T(name)), secs, ("challenge_url", T(url))],
        );
    }
    if quota {
        let before = format!("Quota \"{name}\" used up for this period: it renews in ");
        let mut extra = vec![("limit", T(name)), secs];
        if let Some(url) = &cfg.upgrade_url {
            extra.push(("upgrade_url", T(url)));
        }
        return Problem::QuotaExceeded.template(&[T(&before), H(Hole::Secs), T(" s.")], &extra);
    }
    let before = format!("Rate limit \"{name}\" exceeded: retry in ");
    Problem::RateLimited.template(
        &[T(&before), H(Hole::Secs), T(" s.")],
        &[("limit", T(name)), secs],
    )
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

/// Appends `s` escaped for the inside of a JSON string literal (no quotes). Request ids and
/// plain text need no escape and are copied as they are.
fn json_inner(out: &mut Vec<u8>, s: &str) {
    // Every byte looked at, without a branch per byte (the compiler vectorizes the fold):
    // request ids and names are short and nearly always plain.
    let escape = s
        .bytes()
        .fold(false, |e, b| e | (b < 0x20) | (b == b'"') | (b == b'\\'));
    if !escape {
        out.extend_from_slice(s.as_bytes());
    } else {
        let at = out.len();
        json_str(out, s);
        // Drop the quotes serde_json wrote around it.
        out.pop();
        out.remove(at);
    }
}

/// A field value of an answer, in the form it already has: a header value (validated when it
/// was made), a number, a constant, or the RateLimit item of a limit.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Header(&'a http::HeaderValue),
    Int(u64),
    Static(&'static str),
    /// `"name";r=R;t=T` (RateLimit), `name_sf` already a Structured Fields string.
    RateLimit {
        name_sf: &'a str,
        remaining: u64,
        reset: u64,
    },
}

/// Where the fields of a response go: a header map, or the wire lines of an edge answer.
pub trait Fields {
    /// Sets `name` (once per answer: edge answers and the names Tollgate adds never repeat).
    fn put(&mut self, name: &StaticHeaderName, value: Value);
}

impl Fields for ResponseHeader {
    fn put(&mut self, name: &StaticHeaderName, value: Value) {
        let v = match value {
            Value::Header(v) => v.clone(),
            Value::Int(n) => http::HeaderValue::from(n),
            Value::Static(s) => http::HeaderValue::from_static(s),
            Value::RateLimit {
                name_sf,
                remaining,
                reset,
            } => match ratelimit_value(name_sf, remaining, reset) {
                Some(v) => v,
                None => return,
            },
        };
        self.insert_static_header(name, v);
    }
}

/// The head of an edge answer. Over HTTP/1 its fields go straight into wire lines, and the
/// session writes head and body in one piece (vendor patch 0012: no header map is built);
/// over HTTP/2 they go into a header map as for any response.
pub enum Head {
    Wire { status: u16, lines: Vec<u8> },
    Map(Box<ResponseHeader>),
}

impl Head {
    /// A head with the fields every edge answer has: Content-Type, Content-Length (on the
    /// wire `len` is not used: the session writes the length of the body it is given),
    /// X-Request-Id and `Cache-Control: no-store`.
    pub fn new(
        wire: bool,
        status: u16,
        content_type: &'static str,
        len: usize,
        request_id: &http::HeaderValue,
    ) -> Result<Head> {
        if !wire {
            return Ok(Head::Map(Box::new(header(
                status,
                content_type,
                len,
                request_id,
            )?)));
        }
        let mut head = Head::Wire {
            status,
            lines: Vec::with_capacity(320),
        };
        common_fields(&mut head, content_type, request_id);
        Ok(head)
    }
}

impl Head {
    /// Adds a field whose name is known only at run time (a header rule's; the config
    /// refused framing, hop-by-hop and gateway-owned names).
    pub fn put_named(&mut self, name: &http::HeaderName, value: &http::HeaderValue) {
        match self {
            Head::Map(h) => {
                let _ = h.append_header(name.clone(), value.clone());
            }
            Head::Wire { lines, .. } => {
                lines.extend_from_slice(name.as_str().as_bytes());
                lines.extend_from_slice(b": ");
                lines.extend_from_slice(value.as_bytes());
                lines.extend_from_slice(b"\r\n");
            }
        }
    }

    /// Adds a field even when the head has one of that name (`Set-Cookie`).
    pub fn append(&mut self, name: &StaticHeaderName, value: &http::HeaderValue) {
        match self {
            Head::Map(h) => {
                let _ = h.append_header(name.name().clone(), value.clone());
            }
            Head::Wire { .. } => self.put(name, Value::Header(value)),
        }
    }
}

impl Fields for Head {
    fn put(&mut self, name: &StaticHeaderName, value: Value) {
        let out = match self {
            Head::Map(h) => return h.put(name, value),
            Head::Wire { lines, .. } => lines,
        };
        // The session writes the framing; a second Content-Length or Connection would let the
        // client and the next hop read two different messages.
        debug_assert!(
            !matches!(
                name.name().as_str(),
                "content-length" | "transfer-encoding" | "connection"
            ),
            "{} is the session's",
            name.name()
        );
        debug_assert!(
            !matches!(value, Value::Static(s) if s.bytes().any(|b| b < 0x20 && b != b'\t')),
            "a constant value with a control character"
        );
        out.extend_from_slice(name.name().as_str().as_bytes());
        out.extend_from_slice(b": ");
        let mut digits = itoa::Buffer::new();
        match value {
            Value::Header(v) => out.extend_from_slice(v.as_bytes()),
            Value::Int(n) => out.extend_from_slice(digits.format(n).as_bytes()),
            Value::Static(s) => out.extend_from_slice(s.as_bytes()),
            Value::RateLimit {
                name_sf,
                remaining,
                reset,
            } => push_ratelimit(
                out,
                name_sf,
                digits.format(remaining),
                itoa::Buffer::new().format(reset),
            ),
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// The header map of an edge answer: [`Head::new`]'s fields. No case map (names go out as
/// HTTP/2 sends them); room for the RateLimit fields and the rest.
pub fn header(
    status: u16,
    content_type: &'static str,
    len: usize,
    request_id: &http::HeaderValue,
) -> Result<ResponseHeader> {
    let mut h = ResponseHeader::build_no_case(status, Some(12))?;
    // A 1xx or 204 must not carry a length (RFC 9110 8.6); its body is never sent.
    if status >= 200 && status != 204 {
        h.insert_static_header(&names::CONTENT_LENGTH, http::HeaderValue::from(len));
    }
    common_fields(&mut h, content_type, request_id);
    Ok(h)
}

/// The fields every edge answer carries besides its length.
fn common_fields(
    out: &mut impl Fields,
    content_type: &'static str,
    request_id: &http::HeaderValue,
) {
    out.put(&names::CONTENT_TYPE, Value::Static(content_type));
    out.put(&names::X_REQUEST_ID, Value::Header(request_id));
    out.put(&names::CACHE_CONTROL, Value::Static("no-store"));
}

/// What varies in a pre-rendered problem body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hole {
    /// Seconds until a retry passes (a JSON number, or digits inside a string).
    Secs,
    RequestId,
}

/// A piece of a detail or an extra member of a [`Template`]: fixed text or a hole.
#[derive(Debug, Clone, Copy)]
pub enum Piece<'a> {
    Text(&'a str),
    /// A JSON number (an extra member only).
    Int(u64),
    Hole(Hole),
}

/// A problem+json body rendered once (when the config loads), with holes for the values that
/// vary per request: a refusal fills in its wait and request id and copies the rest.
#[derive(Debug, Clone)]
pub struct Template {
    /// Fixed bytes around the holes: `lits.len() == holes.len() + 1`.
    lits: Vec<Box<[u8]>>,
    holes: Vec<Hole>,
    len: usize,
}

impl Template {
    /// The body, the same bytes [`Problem::body`] writes for these values.
    pub fn fill(&self, secs: u64, request_id: &str) -> Bytes {
        let mut secs_text = itoa::Buffer::new();
        let secs_text = secs_text.format(secs).as_bytes();
        let mut out = Vec::with_capacity(self.len + 2 * secs_text.len() + request_id.len());
        for (lit, hole) in self
            .lits
            .iter()
            .zip(self.holes.iter().map(Some).chain([None]))
        {
            out.extend_from_slice(lit);
            match hole {
                Some(Hole::Secs) => out.extend_from_slice(secs_text),
                Some(Hole::RequestId) => json_inner(&mut out, request_id),
                None => {}
            }
        }
        Bytes::from(out)
    }
}

/// Writes a [`Template`]: text goes into the current literal; a hole closes it.
struct Render {
    lits: Vec<Box<[u8]>>,
    holes: Vec<Hole>,
    cur: Vec<u8>,
}

impl Render {
    fn hole(&mut self, h: Hole) {
        self.lits
            .push(std::mem::take(&mut self.cur).into_boxed_slice());
        self.holes.push(h);
    }

    /// A JSON string of pieces.
    fn string(&mut self, pieces: &[Piece]) {
        self.cur.push(b'"');
        for p in pieces {
            match p {
                Piece::Text(s) => json_inner(&mut self.cur, s),
                Piece::Int(n) => json_inner(&mut self.cur, itoa::Buffer::new().format(*n)),
                Piece::Hole(h) => self.hole(*h),
            }
        }
        self.cur.push(b'"');
    }
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

/// RateLimit-Policy's quota and window for a limit (draft-ietf-httpapi-ratelimit-headers-11):
/// a window's count and its length; a bucket's (token, GCRA, leaky) capacity and the whole
/// seconds it takes to refill, so that `r` (what is left of that quota) never exceeds `q`.
pub fn quota_window(cfg: &tollgate_config::model::LimitConfig) -> (u64, u64) {
    let (count, period) = (cfg.rate.count().max(1), cfg.rate.period_ns());
    let caps = cfg.algorithm.caps();
    if caps.window || caps.calendar {
        (cfg.burst, period.div_ceil(1_000_000_000).max(1))
    } else {
        let refill = (cfg.burst as u128 * period as u128).div_ceil(count as u128);
        (cfg.burst, (refill.div_ceil(1_000_000_000) as u64).max(1))
    }
}

/// RateLimit's `t` in whole seconds: until more of the quota is available. A window's quota
/// comes back at its end (`reset`); a bucket's one unit at a time, so until the next unit (at
/// most one emission interval; 0 when the bucket is full).
pub fn reset_secs(cfg: &tollgate_config::model::LimitConfig, remaining: u64, reset: u64) -> u64 {
    let caps = cfg.algorithm.caps();
    if caps.window || caps.calendar {
        return tollgate_limit::ceil_secs(reset);
    }
    if remaining >= cfg.burst {
        return 0;
    }
    let interval = cfg.rate.period_ns() / cfg.rate.count().max(1);
    tollgate_limit::ceil_secs(reset.min(interval.max(1)))
}

/// `"name";q=Q;w=W` for RateLimit-Policy.
pub fn policy_item(name_sf: &str, quota: u64, window_secs: u64) -> String {
    format!("{name_sf};q={quota};w={window_secs}")
}

/// `"name";r=R;t=T` for RateLimit, as a header value built in place.
fn ratelimit_value(name_sf: &str, remaining: u64, reset_secs: u64) -> Option<http::HeaderValue> {
    let (mut r, mut t) = (itoa::Buffer::new(), itoa::Buffer::new());
    let (r, t) = (r.format(remaining), t.format(reset_secs));
    // Sized exactly: `Bytes` takes a full Vec without a second allocation.
    let mut v = Vec::with_capacity(name_sf.len() + 6 + r.len() + t.len());
    push_ratelimit(&mut v, name_sf, r, t);
    http::HeaderValue::from_maybe_shared(Bytes::from(v)).ok()
}

/// Appends the RateLimit item `"name";r=R;t=T`, its numbers already written.
fn push_ratelimit(out: &mut Vec<u8>, name_sf: &str, remaining: &str, reset_secs: &str) {
    out.extend_from_slice(name_sf.as_bytes());
    out.extend_from_slice(b";r=");
    out.extend_from_slice(remaining.as_bytes());
    out.extend_from_slice(b";t=");
    out.extend_from_slice(reset_secs.as_bytes());
}

#[cfg(test)]
mod tests;
