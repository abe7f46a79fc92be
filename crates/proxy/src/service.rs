//! The request phases (Pingora's `ProxyHttp`): route, identify, limit, answer or proxy.
//!
//! Phase by phase:
//! - `request_filter`: request id, route (404 if none), client address, limits (429 if refused),
//!   built-in responders. Answers written here end the request (`Ok(true)`).
//! - `upstream_peer`: the next healthy target of the chosen upstream's pool, round robin (none
//!   healthy: 502; a name that never resolved: 503, from `fail_to_proxy`).
//! - `upstream_request_filter`: X-Request-Id, X-Forwarded-For, X-Forwarded-Proto and the shadow
//!   marker toward the upstream; a client cannot forge the marker.
//! - `response_filter`: X-Request-Id and the RateLimit fields toward the client.
//! - `fail_to_connect` / `fail_to_proxy`: another target on connect failure; problem+json for
//!   what cannot be proxied (502 unreachable, 504 too slow).
//! - `logging`: metrics, and the access log line when enabled.

use crate::ctx::{new_request_id, Ctx, Outcome};
use crate::identity::trusted;
use crate::normalize::{normalize_host, normalize_path, PathRules, Refusal};
use crate::policy::{Plan, Verdict};
use crate::respond::{header, names, Extra, Fields, Head, Problem, Value};
use crate::runtime::{count_unrouted, Runtime};
use crate::shared::Shared;
use async_trait::async_trait;
use bytes::Bytes;
use http::HeaderValue;
use pingora::http::{RequestHeader, ResponseHeader, StaticHeaderName};
use pingora::prelude::*;
use pingora::protocols::http::authority::{
    is_http_family_scheme, raw_target_authority, RawTargetAuthority,
};
use pingora::protocols::http::ServerSession;
use pingora::proxy::FailToProxy;
use pingora::ErrorSource;
use std::borrow::Cow;
use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;
use tollgate_config::Action;
use tollgate_limit::ceil_secs;

pub struct Gateway {
    pub(crate) shared: Arc<Shared>,
}

pub use crate::ctx::in_flight;

impl Gateway {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// The runtime a new request is decided under.
    pub(crate) fn runtime(&self) -> Arc<Runtime> {
        self.shared.runtime.load_full()
    }

    /// Writes a problem+json answer with no extra members or fields: the stage then ends the
    /// request.
    pub(crate) async fn answer_problem(
        &self,
        session: &mut Session,
        ctx: &Ctx,
        p: Problem,
        detail: &str,
    ) -> Result<crate::stages::Step> {
        self.problem(session, ctx, p, detail, &[], &[]).await?;
        Ok(crate::stages::Step::Answered)
    }
}

/// A downstream error that says the client left or stopped reading (past `send_timeout`):
/// nothing more can reach it.
fn client_gone(t: &ErrorType) -> bool {
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
fn push_ip(out: &mut Vec<u8>, ip: IpAddr) {
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

/// Bodies up to this size are read and discarded before an edge answer, so that the client's
/// connection can carry its next request (a refused login POST keeps its keep-alive). Larger
/// or chunked bodies are not read: the connection closes after the answer instead.
const DRAIN_LIMIT: u64 = 64 * 1024;
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

async fn drain_small_body(session: &mut Session) {
    if session.is_body_done() {
        return;
    }
    let small = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n <= DRAIN_LIMIT);
    if small {
        // A client that stalls mid-body loses its connection, nothing else.
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, session.drain_request_body()).await;
    }
}

/// Holds a request for `delay` on a timer (no thread, no polling), watching the connection: a
/// client that leaves ends the hold at once and frees its slot. False if the client left.
async fn hold(session: &mut Session, delay: std::time::Duration) -> bool {
    drain_small_body(session).await;
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    if session.is_body_done() {
        tokio::select! {
            _ = &mut sleep => return true,
            r = session.as_mut().read_body_or_idle(true) => {
                if r.is_err() {
                    return false;
                }
            }
        }
    }
    sleep.await;
    true
}

/// Reads the request body for `body:FIELD` keys, at most `limit` bytes, keeping it for the
/// upstream (Pingora's retry buffer replays what was read: the upstream receives the exact
/// body). Too large: 413; a JSON body that does not parse: 400; no body, or a content type
/// without fields: no fields (those limits do not count the request).
pub(crate) async fn read_key_body(
    session: &mut Session,
    limit: usize,
) -> std::result::Result<Option<crate::identity::ParsedBody>, (Problem, &'static str)> {
    let req = session.req_header();
    let declared = req
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
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
    crate::identity::ParsedBody::parse(&content_type, &buf)
        .map_err(|why| (Problem::BadRequest, why))
}

/// What a request asked for, in canonical spellings ([`crate::normalize`]).
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
fn forwarded_https(value: Option<&HeaderValue>) -> bool {
    value
        .and_then(|v| v.as_bytes().split(|&b| b == b',').next())
        .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"https"))
}

/// `https://HOST[:PORT]PATH[?QUERY]` from the canonical host and path (both already checked:
/// no byte of them can end the header), `None` without a host.
pub(crate) fn https_location(
    host: Option<&str>,
    path: &str,
    query: Option<&str>,
    port: Option<u16>,
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

impl Gateway {
    /// The head of an edge answer for this session: wire lines over HTTP/1, a header map
    /// over HTTP/2 (see [`Head`]).
    pub(crate) fn head(
        session: &Session,
        ctx: &Ctx,
        status: u16,
        content_type: &'static str,
        len: usize,
    ) -> Result<Head> {
        // 1xx, 204 and 304 have no body: they take the header map.
        let wire = session.as_http1().is_some() && status >= 200 && status != 204 && status != 304;
        Head::new(wire, status, content_type, len, &ctx.request_id)
    }

    /// Writes an answer made at the edge. The caller returns `Ok(true)` after it.
    pub(crate) async fn answer(
        &self,
        session: &mut Session,
        ctx: &Ctx,
        mut head: Head,
        body: Bytes,
    ) -> Result<()> {
        ctx.add_limit_headers(&mut head);
        if let Some(v) = &ctx.hsts {
            head.put(&names::STRICT_TRANSPORT_SECURITY, Value::Header(v));
        }
        drain_small_body(session).await;
        // The wire path writes to the HTTP/1 session itself, past Pingora's downstream modules:
        // Tollgate registers none (init_downstream_modules).
        match (head, session.downstream_session.as_mut()) {
            (Head::Wire { status, lines }, ServerSession::H1(h1)) => {
                // What response_written() reports (the status); the fields went on the wire.
                let written = ResponseHeader::build_no_case(status, Some(0))?;
                h1.write_response_with_fields(Box::new(written), &lines, &body)
                    .await
            }
            (Head::Wire { .. }, _) => Error::e_explain(
                InternalError,
                "an HTTP/1 answer's head for a session that is not HTTP/1",
            ),
            (Head::Map(resp), _) => {
                let head_only = session.req_header().method == http::Method::HEAD;
                session
                    .write_response_header(resp, head_only || body.is_empty())
                    .await?;
                if !head_only && !body.is_empty() {
                    session.write_response_body(Some(body), true).await?;
                }
                Ok(())
            }
        }
    }

    /// 308 to the same target over HTTPS (a method and body are kept by a 308, unlike 301).
    pub(crate) async fn redirect_to_https(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        location: Option<HeaderValue>,
    ) -> Result<bool> {
        let Some(location) = location else {
            self.problem(
                session,
                ctx,
                Problem::BadRequest,
                "This address is served over HTTPS only, and the request names no host to redirect to.",
                &[],
                &[],
            )
            .await?;
            return Ok(true);
        };
        let mut head = Self::head(session, ctx, 308, "text/plain", 0)?;
        head.put(&names::LOCATION, Value::Header(&location));
        self.answer(session, ctx, head, Bytes::new()).await?;
        Ok(true)
    }

    pub(crate) async fn problem(
        &self,
        session: &mut Session,
        ctx: &Ctx,
        p: Problem,
        detail: &str,
        extra: &[(&str, Extra<'_>)],
        headers: &[(&StaticHeaderName, HeaderValue)],
    ) -> Result<()> {
        let body = p.body(detail, ctx.request_id(), extra);
        let mut head = Self::head(
            session,
            ctx,
            p.status(),
            "application/problem+json",
            body.len(),
        )?;
        for (k, v) in headers {
            head.put(k, Value::Header(v));
        }
        self.answer(session, ctx, head, body).await
    }

    /// A 429 for `limit`, its body the limit's pre-rendered refusal (rate limit, quota or
    /// challenge: [`crate::respond::refusal`]). `reason` is the metric's reason when not the
    /// limit's own (`rate_limit` or `quota`): `tarpit_overflow` or `challenge`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn refuse(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        rt: &Runtime,
        route: usize,
        limit: usize,
        wait: u64,
        reason: Option<&str>,
    ) -> Result<()> {
        let l = &rt.limits[limit];
        // Retry-After is whole seconds and at least 1: a client that waits that long passes.
        // Jitter only adds: a jittered client still passes when it returns.
        let jitter = l.cfg.retry_after_jitter.as_secs();
        let secs = ceil_secs(wait).max(1)
            + if jitter > 0 {
                fastrand::u64(0..=jitter)
            } else {
                0
            };
        ctx.ratelimit = Some((limit, 0, secs));
        if let Some(pos) = rt.routes[route].cfg.limits.iter().position(|&i| i == limit) {
            let r = &rt.routes[route];
            let counters = match reason {
                Some("tarpit_overflow") => &r.overflowed,
                Some("challenge") => &r.challenged,
                _ => &r.rejected,
            };
            if let Some(c) = counters.get(pos) {
                c.inc();
            }
        }
        // The body was rendered when the config loaded: only the wait and the id go in.
        let body = l.refusal.fill(secs, ctx.request_id());
        let mut head = Self::head(session, ctx, 429, "application/problem+json", body.len())?;
        head.put(&names::RETRY_AFTER, Value::Int(secs));
        self.answer(session, ctx, head, body).await
    }

    /// A global limit could not be decided and its `on_error` is `closed`.
    pub(crate) async fn unavailable(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        rt: &Runtime,
        route: usize,
        limit: usize,
    ) -> Result<()> {
        let l = &rt.limits[limit];
        self.shared
            .metrics
            .rejected
            .with_label_values(&["limiter_unavailable", &rt.routes[route].name, &l.cfg.name])
            .inc();
        let detail = format!(
            "Limit \"{}\" cannot be checked right now and refuses while it cannot: retry shortly.",
            l.cfg.name
        );
        self.problem(
            session,
            ctx,
            Problem::LimiterUnavailable,
            &detail,
            &[("limit", Extra::Str(&l.cfg.name))],
            &[(&names::RETRY_AFTER, HeaderValue::from(1u64))],
        )
        .await
    }

    /// `tollgate_limit_decisions_total` per limit, and refusals per key for the hottest key.
    pub(crate) fn count_decisions(&self, rt: &Runtime, route: usize, plan: &Plan, v: &Verdict) {
        use crate::runtime::{ALLOWED, BLOCKED, REFUSED, SHADOW_REFUSED};
        let refused_any = v.denied.is_some() || v.blocked.is_some();
        let now = plan.now();
        for (pos, &li) in rt.routes[route].cfg.limits.iter().enumerate() {
            let l = &rt.limits[li];
            let bit = 1u32 << pos;
            if v.refused & bit != 0 {
                let blocked = v.blocked.is_some_and(|(b, _)| b == li);
                l.decisions[if blocked { BLOCKED } else { REFUSED }].inc();
                l.hot.refused(plan.key(pos), now);
            } else if v.shadow_exceeded & bit != 0 {
                l.decisions[SHADOW_REFUSED].inc();
            } else if !refused_any && plan.took(pos).any() {
                l.decisions[ALLOWED].inc();
            }
        }
    }

    /// Counts a refusal in the ladders of the limits that refused; a ladder that trips blocks
    /// the key here at once, and through Redis on every instance when Redis is configured.
    pub(crate) fn climb_ladders(&self, rt: &Runtime, route: usize, plan: &Plan, refused: u32) {
        let now = plan.now();
        for (pos, &li) in rt.routes[route].cfg.limits.iter().enumerate() {
            if refused & (1 << pos) == 0 {
                continue;
            }
            let l = &rt.limits[li];
            let Some(lad) = &l.ladder else {
                continue;
            };
            let key = plan.key(pos);
            let Some(t) = lad.ladder.refused(key, now) else {
                continue;
            };
            if let Some(c) = lad.imposed.get(t.rung as usize) {
                c.inc();
            }
            tracing::warn!(
                event = "key_blocked",
                limit = %l.cfg.name,
                route = %rt.routes[route].name,
                key = %format_args!("{key:016x}"),
                rung = t.rung,
                block_for_s = t.block_for.as_secs(),
                "a key refused too often is blocked"
            );
            if let Some(store) = &self.shared.store {
                let (store, name) = (store.clone(), l.cfg.name.clone());
                tokio::spawn(async move {
                    if let Err(e) = store.block(&name, key, t.block_for, t.rung).await {
                        tracing::warn!(limit = %name, error = %e, "could not share a block through Redis");
                    }
                });
            }
        }
    }

    /// 403 `TEMPORARILY_BLOCKED` for a key a ladder blocked.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn blocked(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        rt: &Runtime,
        route: usize,
        limit: usize,
        plan: &Plan,
        wait: u64,
    ) -> Result<()> {
        let l = &rt.limits[limit];
        let pos = rt.routes[route].cfg.limits.iter().position(|&i| i == limit);
        if let Some(c) = pos.and_then(|p| rt.routes[route].blocked.get(p)) {
            c.inc();
        }
        let secs = ceil_secs(wait).max(1);
        ctx.ratelimit = Some((limit, 0, secs));
        let id = format!("{:016x}", pos.map_or(0, |p| plan.key(p)));
        let detail = format!(
            "Blocked for {secs} s after exceeding limit \"{}\" repeatedly.",
            l.cfg.name
        );
        self.problem(
            session,
            ctx,
            Problem::TemporarilyBlocked,
            &detail,
            &[
                ("limit", Extra::Str(&l.cfg.name)),
                ("retry_after", Extra::Int(secs)),
                ("block_id", Extra::Str(&id)),
            ],
            &[(&names::RETRY_AFTER, HeaderValue::from(secs))],
        )
        .await
    }

    /// A request over `limit`: its action decides. True when answered (the caller ends the
    /// request); false when a tarpit passes it on after its hold.
    pub(crate) async fn over_limit(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        rt: &Runtime,
        route: usize,
        limit: usize,
        wait: u64,
    ) -> Result<bool> {
        let l = &rt.limits[limit];
        let tarpit = match l.action {
            Action::Challenge => {
                ctx.outcome = Outcome::Challenged;
                self.refuse(session, ctx, rt, route, limit, wait, Some("challenge"))
                    .await?;
                return Ok(true);
            }
            Action::Tarpit => l.tarpit.as_ref(),
            Action::Reject => rt.routes[route].tarpit.as_ref(),
        };
        let Some(tarpit) = tarpit else {
            self.refuse(session, ctx, rt, route, limit, wait, None)
                .await?;
            return Ok(true);
        };
        let r = &rt.routes[route];
        let Some(slot) = tarpit.enter(&r.tarpit_held) else {
            ctx.outcome = Outcome::TarpitOverflow;
            // Full: holding more would let an attacker spend our memory instead of theirs.
            self.refuse(
                session,
                ctx,
                rt,
                route,
                limit,
                wait,
                Some("tarpit_overflow"),
            )
            .await?;
            return Ok(true);
        };
        r.tarpit_total.inc();
        ctx.outcome = Outcome::Tarpitted;
        let held = tarpit.delay();
        let stayed = hold(session, held).await;
        drop(slot);
        if !stayed {
            let mut e = Error::explain(
                ErrorType::ConnectionClosed,
                "the client left while held in the tarpit",
            );
            e.esource = ErrorSource::Downstream;
            return Err(e);
        }
        if tarpit.cfg.then_pass {
            ctx.outcome = Outcome::TarpitPassed;
            return Ok(false);
        }
        // The connection closes after the answer: the next attempt pays for a new one. The
        // wait is what is left of it after the hold.
        session.set_keepalive(None);
        let left = wait.saturating_sub(u64::try_from(held.as_nanos()).unwrap_or(u64::MAX));
        self.refuse(session, ctx, rt, route, limit, left, None)
            .await?;
        Ok(true)
    }

    pub(crate) fn note_verdict(
        &self,
        ctx: &mut Ctx,
        rt: &Runtime,
        route: usize,
        v: &Verdict,
        plan: &Plan,
    ) {
        if let Some((li, used)) = v.quota_warning {
            let l = &rt.limits[li];
            let quota = l.quota_rt.as_ref().map_or(0, |q| q.quota);
            ctx.quota_warning = HeaderValue::from_str(&format!(
                "quota \"{}\" exceeded: {used} of {quota} used this period",
                l.cfg.name
            ))
            .ok();
        }
        if let Some((li, remaining, reset)) = v.nearest {
            ctx.ratelimit = Some((li, remaining, ceil_secs(reset)));
        }
        if v.shadow_exceeded != 0 {
            ctx.shadow_exceeded = true;
            let limits = &rt.routes[route].cfg.limits;
            for (pos, &li) in limits.iter().enumerate() {
                if v.shadow_exceeded & (1 << pos) != 0 {
                    let l = &rt.limits[li];
                    l.shadow_counter.inc();
                    tracing::warn!(
                        event = "shadow_limit_exceeded",
                        limit = %l.cfg.name,
                        route = %rt.routes[route].name,
                        key = %format_args!("{:016x}", plan.key(pos)),
                        would_be_status = 429u16,
                        request_id = %ctx.request_id(),
                        "a shadow-mode limit would have refused this request"
                    );
                }
            }
        }
    }
}

impl Gateway {
    /// `count = "failures"`: a request whose response is not a failure gives its unit back
    /// (a successful login costs nothing; a 401 counts).
    fn refund_unless_failure(
        &self,
        rt: &Runtime,
        units: &[(usize, u64, crate::policy::Took)],
        status: u16,
    ) {
        let now = self.shared.clock.now();
        for &(li, key, took) in units {
            let l = &rt.limits[li];
            if l.cfg
                .count_failures
                .as_ref()
                .is_some_and(|f| f.contains(&status))
            {
                continue;
            }
            let t = l.time(
                now,
                if l.quota {
                    self.shared.clock.unix_now()
                } else {
                    0
                },
            );
            crate::policy::return_unit(l, key, t, took);
        }
    }
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    /// No downstream modules: Pingora's default adds a disabled compression module that every
    /// request still walks through. Tollgate does not compress; the upstream does. (Edge
    /// answers over HTTP/1 are written past the modules: add one here, and `answer` must take
    /// the header map path.)
    fn init_downstream_modules(&self, _modules: &mut pingora::modules::http::HttpModules) {}

    fn new_ctx(&self) -> Ctx {
        Ctx::new()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        crate::stages::run(self, session, ctx).await
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        // Chosen by request_filter for every request that gets here.
        let (Some(rt), Some(u)) = (&ctx.rt, ctx.upstream) else {
            return Err(Error::explain(
                ErrorType::InternalError,
                "no upstream in context",
            ));
        };
        ctx.tries += 1;
        let Some(peer) = rt.upstreams[u].pool.select_peer() else {
            let mut e = Error::explain(
                ErrorType::ConnectNoRoute,
                "no healthy target in the upstream pool",
            );
            e.esource = ErrorSource::Upstream;
            return Err(e);
        };
        Ok(peer)
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut Ctx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        // Try the next target: as many times as the pool has targets.
        let targets = match (&ctx.rt, ctx.upstream) {
            (Some(rt), Some(u)) => rt.upstreams[u].pool.len(),
            _ => 0,
        };
        if ctx.tries < targets {
            e.set_retry(true);
        }
        e
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        upstream.insert_static_header(&names::X_REQUEST_ID, ctx.request_id.clone());
        if let Some(target) = &ctx.upstream_target {
            // The route rewrote the path (the query is in it already).
            upstream.set_raw_path(target.target.as_bytes())?;
            if let Some(authority) = &ctx.target_authority {
                if !upstream.headers.contains_key(http::header::HOST) {
                    upstream.insert_header(http::header::HOST, authority.as_str())?;
                }
            }
        } else if let Some(path) = &ctx.canonical_path {
            // The upstream reads what the gateway routed on, in origin form; the query goes
            // as it came.
            let raw = upstream.raw_path();
            let query = raw
                .iter()
                .position(|&b| b == b'?')
                .map(|q| raw[q..].to_vec());
            let mut target = path.clone().into_bytes();
            target.extend_from_slice(query.as_deref().unwrap_or_default());
            upstream.set_raw_path(&target)?;
            if let Some(authority) = &ctx.target_authority {
                if !upstream.headers.contains_key(http::header::HOST) {
                    upstream.insert_header(http::header::HOST, authority.as_str())?;
                }
            }
        }
        // X-Forwarded-For: every prior value in order, then the peer, in one buffer.
        let mut xff = Vec::with_capacity(64);
        for v in upstream.headers.get_all(names::X_FORWARDED_FOR.name()) {
            xff.extend_from_slice(v.as_bytes());
            xff.extend_from_slice(b", ");
        }
        push_ip(&mut xff, ctx.peer);
        upstream.insert_static_header(
            &names::X_FORWARDED_FOR,
            HeaderValue::from_maybe_shared(Bytes::from(xff))
                .map_err(|_| Error::explain(ErrorType::InvalidHTTPHeader, "X-Forwarded-For"))?,
        );
        let from_trusted = ctx
            .rt
            .as_ref()
            .is_some_and(|rt| trusted(ctx.peer, &rt.trusted_proxies));
        if !(from_trusted
            && upstream
                .headers
                .contains_key(names::X_FORWARDED_PROTO.name()))
        {
            let proto = if session
                .digest()
                .and_then(|d| d.ssl_digest.as_ref())
                .is_some()
            {
                "https"
            } else {
                "http"
            };
            upstream
                .insert_static_header(&names::X_FORWARDED_PROTO, HeaderValue::from_static(proto));
        }
        // A client cannot forge the shadow marker: removed unless the gateway sets it.
        if ctx.shadow_exceeded {
            upstream
                .insert_static_header(&names::SHADOW_EXCEEDED, HeaderValue::from_static("true"));
        } else {
            upstream.remove_header(names::SHADOW_EXCEEDED.name());
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        resp.insert_static_header(&names::X_REQUEST_ID, ctx.request_id.clone());
        if let Some(v) = &ctx.hsts {
            resp.insert_static_header(&names::STRICT_TRANSPORT_SECURITY, v.clone());
        }
        if resp.status == http::StatusCode::SWITCHING_PROTOCOLS {
            // An upgraded connection is not bound by the body deadlines.
            session.set_read_timeout(None);
        }
        ctx.add_limit_headers(resp);
        Ok(())
    }

    /// `min_body_rate`: once a body has been arriving for longer than `body_timeout`, it must
    /// have averaged at least that rate. Each read may wait only as long as the bytes so far
    /// keep the average (and never longer than `body_timeout`), so a dripping client is cut
    /// off within `body_timeout` of falling behind, and its upstream connection released.
    async fn request_body_filter(
        &self,
        session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let Some(rt) = &ctx.rt else { return Ok(()) };
        if session.was_upgraded() {
            // A WebSocket (or other upgrade) is not a body: quiet for minutes is fine.
            session.set_read_timeout(None);
            return Ok(());
        }
        let h = &rt.config.server.hardening;
        ctx.body_bytes += body.as_ref().map_or(0, |b| b.len() as u64);
        // A concurrency slot's time: the body is in by then, or the request is cut (408)
        // and its slot comes back, however fast the body comes.
        let slot_left = match ctx.slot_deadline {
            Some(_) if end_of_stream => {
                ctx.slot_deadline = None;
                None
            }
            Some(due) => {
                let left = due.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let mut e = Error::explain(
                        ErrorType::ReadTimedout,
                        "the request held a concurrency slot past slot_timeout before its body was in",
                    );
                    e.esource = ErrorSource::Downstream;
                    return Err(e);
                }
                Some(left)
            }
            None => None,
        };
        if end_of_stream || h.min_body_rate == 0 {
            if let Some(left) = slot_left {
                session.set_read_timeout(Some(left.min(h.body_timeout)));
            }
            return Ok(());
        }
        // Counted from the body's first bytes: time the gateway itself held the request (a
        // tarpit, a leaky bucket's queue, a slow decision) is not the client's.
        let started = *ctx.body_started.get_or_insert_with(Instant::now);
        let elapsed = started.elapsed();
        let rate = h.min_body_rate as f64;
        // The moment the bytes so far stop meeting the rate (never before body_timeout).
        let due = h.body_timeout.max(std::time::Duration::from_secs_f64(
            ctx.body_bytes as f64 / rate,
        ));
        if elapsed > h.body_timeout && (ctx.body_bytes as f64) < rate * elapsed.as_secs_f64() {
            let mut e = Error::explain(
                ErrorType::ReadTimedout,
                "the request body arrived slower than min_body_rate",
            );
            e.esource = ErrorSource::Downstream;
            return Err(e);
        }
        let wait = due
            .saturating_sub(elapsed)
            .clamp(std::time::Duration::from_millis(1), h.body_timeout);
        session.set_read_timeout(Some(slot_left.map_or(wait, |left| wait.min(left))));
        Ok(())
    }

    /// What Pingora's error lines say about a request: the method and the route, never the
    /// path, query or a header (they may carry keys and tokens).
    fn request_summary(&self, session: &Session, ctx: &Ctx) -> String {
        let route = match (&ctx.rt, ctx.route) {
            (Some(rt), Some(r)) => &*rt.routes[r].name,
            _ => "-",
        };
        format!(
            "{} route {route}, request id {}",
            session.req_header().method,
            ctx.request_id()
        )
    }

    /// A request Pingora could not read (malformed 400, head too slow 408, too large 431):
    /// problem+json like every other edge answer, and counted.
    fn invalid_request_response(
        &self,
        status: u16,
        _error: &Error,
    ) -> Option<(ResponseHeader, Bytes)> {
        let (problem, detail) = match status {
            408 => (
                Problem::RequestTimeout,
                "The request head did not arrive within header_timeout.",
            ),
            431 => (
                Problem::HeaderFieldsTooLarge,
                "The request head is over max_header_bytes or max_headers.",
            ),
            _ => (Problem::BadRequest, "The request could not be read."),
        };
        count_unrouted(&self.shared.metrics, problem.status());
        let id = new_request_id();
        let body = problem.body(detail, id.to_str().unwrap_or(""), &[]);
        let mut resp = header(
            problem.status(),
            "application/problem+json",
            body.len(),
            &id,
        )
        .ok()?;
        resp.insert_static_header(&names::CONNECTION, HeaderValue::from_static("close"));
        Some((resp, body))
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        // No target because no name of the upstream resolves (yet): 503, not 502.
        let unresolved = *e.etype() == ErrorType::ConnectNoRoute
            && matches!((&ctx.rt, ctx.upstream), (Some(rt), Some(u)) if rt.upstreams[u].pool.is_empty());
        let problem = match e.etype() {
            _ if unresolved => Some(Problem::UpstreamUnresolved),
            ErrorType::HTTPStatus(400) => Some(Problem::BadRequest),
            ErrorType::HTTPStatus(_) => Some(Problem::Internal),
            _ => match e.esource() {
                ErrorSource::Upstream => match e.etype() {
                    ErrorType::ReadTimedout | ErrorType::WriteTimedout => {
                        Some(Problem::UpstreamTimeout)
                    }
                    _ => Some(Problem::UpstreamUnavailable),
                },
                ErrorSource::Downstream => match e.etype() {
                    // The client is gone or stopped reading (send_timeout): nothing can reach it.
                    t if client_gone(t) => None,
                    // A body that stalled or dripped below min_body_rate.
                    ErrorType::ReadTimedout => Some(Problem::RequestTimeout),
                    _ => Some(Problem::BadRequest),
                },
                ErrorSource::Internal | ErrorSource::Unset => Some(Problem::Internal),
            },
        };
        let mut code = 0;
        if let Some(p) = problem {
            code = p.status();
            if session.response_written().is_none() {
                if ctx.request_id.is_empty() {
                    ctx.request_id = new_request_id();
                }

                let detail = match p {
                    Problem::UpstreamUnavailable => "The upstream could not be reached.",
                    Problem::UpstreamUnresolved => {
                        "The upstream's address is not known: its name does not resolve (yet)."
                    }
                    Problem::UpstreamTimeout => "The upstream did not answer in time.",
                    Problem::BadRequest => "The request could not be read.",
                    Problem::RequestTimeout => {
                        "The request body did not arrive in time (body_timeout, min_body_rate)."
                    }
                    _ => "The gateway failed to handle this request.",
                };
                if let Err(err) = self.problem(session, ctx, p, detail, &[], &[]).await {
                    tracing::debug!(error = %err, "could not send the error response");
                }
            }
        }
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    /// A client that left, stopped reading or dripped its body is the client's doing, not
    /// the gateway's: its request line carries the error, and Pingora's ERROR line is not
    /// written (a client could otherwise fill the log with them at will).
    fn suppress_error_log(&self, _session: &Session, _ctx: &Ctx, e: &Error) -> bool {
        *e.esource() == ErrorSource::Downstream
            && (client_gone(e.etype()) || *e.etype() == ErrorType::ReadTimedout)
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        let status = session
            .response_written()
            .map(|r| r.status.as_u16())
            .unwrap_or(0);
        if !ctx.refund_unless_failure.is_empty() {
            if let Some(rt) = &ctx.rt {
                self.refund_unless_failure(rt, &ctx.refund_unless_failure, status);
            }
        }
        let elapsed = ctx.start.elapsed();
        let metrics = &self.shared.metrics;
        match (&ctx.rt, ctx.route) {
            (Some(rt), Some(route)) => {
                let r = &rt.routes[route];
                r.count(metrics, status);
                r.duration.observe(elapsed.as_secs_f64());
            }
            _ => count_unrouted(metrics, status),
        }
        let access_log = ctx
            .rt
            .as_ref()
            .is_some_and(|rt| rt.config.server.access_log);
        if access_log || e.is_some() {
            let req = session.req_header();
            let rt = ctx.rt.as_ref();
            let route = match (rt, ctx.route) {
                (Some(rt), Some(route)) => &*rt.routes[route].name,
                _ => "",
            };
            let limit = match (rt, ctx.outcome_limit) {
                (Some(rt), Some(l)) => rt.limits[l].cfg.name.as_str(),
                _ => "",
            };
            let error = e.map(|e| e.to_string());
            // The client only as a pseudonym under this process's random key: one client's
            // lines can be followed, and no table of addresses turns it back into one.
            let client = self.shared.hasher.pseudonym(ctx.client.unwrap_or(ctx.peer));
            tracing::info!(
                event = "request",
                request_id = %ctx.request_id(),
                method = %req.method,
                route,
                status,
                duration_ms = elapsed.as_secs_f64() * 1000.0,
                decision = ctx.outcome.name(),
                limit,
                shadow_exceeded = ctx.shadow_exceeded,
                client = %format_args!("{client:016x}"),
                upstream_tries = ctx.tries,
                error = error.as_deref().unwrap_or(""),
            );
        }
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
            https_location(h, p, q, port).map(|v| v.to_str().map(str::to_string).ok())
        };
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
