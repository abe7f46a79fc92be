//! One request's state, shared by its phases and stages. Fields are grouped by the stage
//! that writes them (see [`crate::stages`]); later stages and phases only read them.

use crate::runtime::Runtime;
use http::HeaderValue;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tollgate_core::respond::{names, Fields, Value};

/// Requests being handled right now, process-wide (drain waits for zero).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// How many requests are being handled right now.
pub fn in_flight() -> usize {
    IN_FLIGHT.load(Ordering::Acquire)
}

/// Counts one request for as long as its context lives.
struct InFlight;

impl InFlight {
    fn new() -> Self {
        IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Per-request state shared across phases.
pub struct Ctx {
    _in_flight: InFlight,
    pub start: Instant,
    /// The request's trace (`[tracing]` only: `None` costs nothing elsewhere).
    pub trace: Option<Box<tollgate_core::observe::traces::TraceCtx>>,
    /// The runtime this request is decided and proxied under (a reload swaps in another for
    /// the next requests; this one keeps its own to the end).
    pub rt: Option<Arc<Runtime>>,

    // Stage 1, request.
    /// Kept as a header value: it is sent both ways, and clones share one buffer.
    pub request_id: HeaderValue,
    pub peer: IpAddr,
    /// The request came over TLS (here, or to a trusted proxy that says so).
    pub secure: bool,
    /// Strict-Transport-Security for this response (requests over TLS, `[tls] hsts`).
    pub hsts: Option<HeaderValue>,

    // Stage 2, route.
    pub route: Option<usize>,
    /// The canonical path when it differs from the client's spelling: routing and keys read
    /// it, and the upstream is sent it (with the query as the client wrote it).
    pub canonical_path: Option<String>,
    /// An absolute-form target's authority: the upstream's Host if the client sent none.
    pub target_authority: Option<String>,
    /// The request target sent upstream when the route rewrites the path: keys and input
    /// checks read its path and query (what the upstream reads), decided before them.
    pub upstream_target: Option<tollgate_route::routing::Rewritten>,

    /// The body cap the body stage set (0: none), counted in `request_body_filter`.
    pub max_body: u64,
    /// Edge state of a route with header rules, CORS, compression or bandwidth.
    pub shaping: Option<Box<tollgate_core::filters::shaping::ShapingCtx>>,

    // Stage 4, auth.
    /// What the route's auth decided (`None` on a route without auth: one pointer, nothing to
    /// make or drop on the requests of other routes).
    pub auth: Option<Box<AuthCtx>>,

    // Stages 3 and 5, access and limits.
    /// What the edge decided, for the access log: see [`Outcome`]; with the limit concerned.
    pub outcome: Outcome,
    pub outcome_limit: Option<usize>,
    /// The client as the limits saw it (through trusted proxies), logged only as a hash.
    pub client: Option<IpAddr>,
    /// The caller's plan (index into the config's plans; 0 without plans).
    pub plan: usize,
    /// What the RateLimit fields (and the legacy X-RateLimit-* ones) tell the client:
    /// (limit, remaining, reset seconds).
    pub ratelimit: Option<(usize, u64, u64)>,
    /// A quota admitted this request past its count.
    pub quota_warning: Option<HeaderValue>,
    /// A shadow limit would have refused: the upstream is told.
    pub shadow_exceeded: bool,
    /// Units of `count = "failures"` limits, given back unless the response is a failure:
    /// (limit, key, taken locally, taken in Redis). Empty on other routes (no allocation).
    pub refund_unless_failure: Vec<(usize, u64, crate::limits::policy::Took)>,
    /// Slots of concurrency limits, given back when the request ends (the context drops).
    pub slots: Option<crate::limits::slots::Slots>,
    /// When the request must have its body in, for holding those slots (their limits'
    /// shortest `slot_timeout`): past it the request is cut (408) and its slots come back.
    pub slot_deadline: Option<Instant>,

    // Stage 6, action; then the proxy phases.
    /// The upstream chosen for this request (the route's, or its canary's), once for all
    /// its tries.
    pub upstream: Option<usize>,
    pub tries: usize,
    /// Targets tried, the pick in flight, the affinity pin (upstreams with a policy, affinity
    /// or retries only).
    pub balance: Option<Box<tollgate_upstream::attempt::BalanceCtx>>,
    /// The address of the attempt in flight, when its upstream ejects outliers (what its
    /// answer or failure is counted against); taken when its answer's head came, so one
    /// attempt counts once.
    pub target: Option<std::net::SocketAddr>,
    /// Request body bytes passed on so far, and when the first came, for `min_body_rate`.
    pub body_bytes: u64,
    pub body_started: Option<Instant>,
    /// The route's `mirror` copy of this request.
    pub mirroring: Mirroring,
    /// An `error_pages` page in place of the upstream's answer.
    pub page: Option<Box<Page>>,
}

/// An `error_pages` page in place of the upstream's answer.
pub struct Page {
    /// Its head, when `fail_to_proxy` writes it (an upstream answer without a body, whose
    /// framing cannot carry one).
    pub head: Option<pingora::http::ResponseHeader>,
    /// Its body, until written (in place of the upstream's, which is dropped).
    pub body: Option<bytes::Bytes>,
}

/// Where a request's `mirror` copy is.
pub enum Mirroring {
    /// Not started (or the route has no mirror).
    No,
    /// Its head taken, its body being read.
    Reading(Box<tollgate_core::net::mirror::Copy>),
    /// Sent, or dropped: never again for this request (a retry is not copied twice).
    Done,
}

impl Ctx {
    pub fn new() -> Self {
        Ctx {
            _in_flight: InFlight::new(),
            start: Instant::now(),
            trace: None,
            rt: None,
            request_id: HeaderValue::from_static(""),
            peer: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            secure: false,
            hsts: None,
            route: None,
            canonical_path: None,
            target_authority: None,
            upstream_target: None,
            max_body: 0,
            shaping: None,
            auth: None,
            outcome: Outcome::Unlimited,
            outcome_limit: None,
            client: None,
            plan: 0,
            ratelimit: None,
            quota_warning: None,
            shadow_exceeded: false,
            refund_unless_failure: Vec::new(),
            slots: None,
            slot_deadline: None,
            upstream: None,
            tries: 0,
            balance: None,
            target: None,
            body_bytes: 0,
            body_started: None,
            mirroring: Mirroring::No,
            page: None,
        }
    }
}

impl Default for Ctx {
    fn default() -> Self {
        Self::new()
    }
}

/// What the route's auth decided about a request.
pub struct AuthCtx {
    /// The auth (its headers are the upstream's to get from it alone).
    pub rt: Arc<tollgate_auth::AuthRt>,
    /// The consumer, the verified claims, the headers for the upstream and the cookies for the
    /// client (empty when refused).
    pub passed: tollgate_auth::Passed,
    /// A refusal answered after the limits (on a route counting failures).
    pub refusal: Option<tollgate_auth::Refusal>,
}

impl Ctx {
    /// The consumer the route's auth named (the `consumer` key source).
    pub fn consumer(&self) -> Option<&str> {
        self.auth.as_ref()?.passed.consumer.as_deref()
    }

    /// The claims of the token the route's auth verified.
    pub fn claims(&self) -> Option<&tollgate_auth::jwt::Claims> {
        self.auth.as_ref()?.passed.claims.as_deref()
    }
}

/// The edge's decision about a request, as the access log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No access list or limit applies to the route.
    Unlimited,
    Allowed,
    /// Allowed by an access list: no limit applied.
    AllowListed,
    AccessDenied,
    Refused,
    Blocked,
    Tarpitted,
    TarpitPassed,
    TarpitOverflow,
    Challenged,
    /// A global limit could not be decided and its on_error is closed.
    Unavailable,
    /// The route's auth refused the request (401, 403, its sign-in redirect, or its auth
    /// service's failure).
    Unauthenticated,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Unlimited => "unlimited",
            Outcome::Allowed => "allowed",
            Outcome::AllowListed => "allow_listed",
            Outcome::AccessDenied => "access_denied",
            Outcome::Refused => "refused",
            Outcome::Blocked => "blocked",
            Outcome::Tarpitted => "tarpitted",
            Outcome::TarpitPassed => "tarpit_passed",
            Outcome::TarpitOverflow => "tarpit_overflow",
            Outcome::Challenged => "challenged",
            Outcome::Unavailable => "unavailable",
            Outcome::Unauthenticated => "unauthenticated",
        }
    }
}

/// A client's X-Request-Id is kept when it is short and made of safe characters.
pub fn valid_request_id(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= 128
        && v.iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:+/=@".contains(b))
}

/// 128 random bits as 32 lower-case hex digits.
pub fn new_request_id() -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let n = fastrand::u128(..);
    let mut buf = [0u8; 32];
    for (i, pair) in buf.chunks_exact_mut(2).enumerate() {
        let byte = (n >> (120 - 8 * i)) as u8;
        pair[0] = HEX[usize::from(byte >> 4)];
        pair[1] = HEX[usize::from(byte & 0xf)];
    }
    HeaderValue::from_bytes(&buf).unwrap_or(HeaderValue::from_static("0"))
}

impl Ctx {
    /// The request id as text (always ASCII: validated or generated).
    pub fn request_id(&self) -> &str {
        self.request_id.to_str().unwrap_or("")
    }

    /// RateLimit-Policy (the route's enforced limits) and RateLimit (the decision), on every
    /// response of a limited route, whoever wrote it.
    pub fn add_limit_headers(&self, out: &mut impl Fields) {
        let (Some(rt), Some(route)) = (&self.rt, self.route) else {
            return;
        };
        if let Some(Some(p)) = rt.routes[route].policy_headers.get(self.plan) {
            out.put(&names::RATELIMIT_POLICY, Value::Header(p));
        }
        let shown = self
            .ratelimit
            .map(|(li, remaining, reset)| (&rt.limits[li], remaining, reset));
        if let Some((l, remaining, reset)) = shown {
            out.put(
                &names::RATELIMIT,
                Value::RateLimit {
                    name_sf: &l.name_sf,
                    remaining,
                    reset,
                },
            );
        }
        if let Some(w) = &self.quota_warning {
            out.put(&names::X_QUOTA_WARNING, Value::Header(w));
        }
        if let Some((l, remaining, reset)) = shown {
            if rt.config.server.legacy_headers {
                out.put(
                    &names::X_RATELIMIT_LIMIT,
                    Value::Int(tollgate_core::respond::quota_window(&l.cfg).0),
                );
                out.put(&names::X_RATELIMIT_REMAINING, Value::Int(remaining));
                out.put(&names::X_RATELIMIT_RESET, Value::Int(reset));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_ids_are_32_lower_hex_digits_of_the_whole_random_number() {
        let ids: Vec<String> = (0..64)
            .map(|_| super::new_request_id().to_str().expect("ascii").to_string())
            .collect();
        for id in &ids {
            assert_eq!(id.len(), 32, "{id}");
            assert!(
                id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
                "{id}"
            );
        }
        // Every digit position varies (no half of the number left out).
        for pos in 0..32 {
            let first = ids[0].as_bytes()[pos];
            assert!(
                ids.iter().any(|id| id.as_bytes()[pos] != first),
                "digit {pos}"
            );
        }
    }
}
