//! What the gateway answers at the edge: the answers the stages and phases write
//! (problem+json, 429 and its RateLimit fields, 403 for a block, 503, redirects), and the
//! request-reading helpers the stages share (the canonical target, TLS, the key body). The
//! stages ([`crate::stages`]) and the phases ([`crate::gateway`]) both build on this module;
//! it builds on neither (only on the [`Gateway`] type).

use crate::ctx::{Ctx, Outcome};
use crate::gateway::Gateway;
use crate::limits::policy::{Plan, Verdict};
use crate::runtime::series::RefusalKind;
use crate::runtime::Runtime;
use bytes::Bytes;
use http::HeaderValue;
use pingora::http::{RequestHeader, ResponseHeader, StaticHeaderName};
use pingora::prelude::*;
use pingora::protocols::http::authority::{
    is_http_family_scheme, raw_target_authority, RawTargetAuthority,
};
use pingora::protocols::http::ServerSession;
use pingora::ErrorSource;
use std::borrow::Cow;
use std::io::Write;
use std::net::IpAddr;
use tollgate_config::Action;
use tollgate_core::client_ip::trusted;
use tollgate_core::respond::{names, Extra, Fields, Head, Problem, Value};
use tollgate_limit::ceil_secs;
use tollgate_route::normalize::{normalize_host, normalize_path, PathRules, Refusal};

/// What a stage decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Go on to the next stage.
    Next,
    /// An answer was written: the request ends here.
    Answered,
}

impl Gateway {
    /// Writes a problem+json answer with no extra members or fields: the stage then ends the
    /// request.
    pub(crate) async fn answer_problem(
        &self,
        session: &mut Session,
        ctx: &Ctx,
        p: Problem,
        detail: &str,
    ) -> Result<Step> {
        self.problem(session, ctx, p, detail, &[], &[]).await?;
        Ok(Step::Answered)
    }
}

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

/// Bodies up to this size are read and discarded before an edge answer, so that the client's
/// connection can carry its next request (a refused login POST keeps its keep-alive). Larger
/// or chunked bodies are not read: the connection closes after the answer instead.
pub(crate) const DRAIN_LIMIT: u64 = 64 * 1024;
pub(crate) const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

pub(crate) async fn drain_small_body(session: &mut Session) {
    drain_body_up_to(session, DRAIN_LIMIT).await
}

/// The request's declared body length: `None` without `Content-Length`, `Some(None)` when it
/// is not a number (Pingora refuses those before any phase; kept for safety), else the length.
pub(crate) fn declared_length(req: &pingora::http::RequestHeader) -> Option<Option<u64>> {
    req.headers.get(http::header::CONTENT_LENGTH).map(|v| {
        std::str::from_utf8(v.as_bytes())
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    })
}

/// [`drain_small_body`] for bodies of at most `limit` bytes.
async fn drain_body_up_to(session: &mut Session, limit: u64) {
    if session.is_body_done() {
        return;
    }
    let small = declared_length(session.req_header())
        .flatten()
        .is_some_and(|n| n <= limit);
    if small {
        // A client that stalls mid-body loses its connection, nothing else.
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, session.drain_request_body()).await;
    }
}

/// Holds a request for `delay` on a timer (no thread, no polling), watching the connection: a
/// client that leaves ends the hold at once and frees its slot. False if the client left.
pub(crate) async fn hold(session: &mut Session, delay: std::time::Duration) -> bool {
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
        if let (Some(rt), Some(route)) = (&ctx.rt, ctx.route) {
            if let Some(s) = &rt.routes[route].shaping {
                crate::edge::edge_answer(s, ctx, session, &mut head);
            }
        }
        // Never read a body over the route's cap (a 413): the connection closes instead.
        let limit = match ctx.max_body {
            0 => DRAIN_LIMIT,
            cap => cap.min(DRAIN_LIMIT),
        };
        drain_body_up_to(session, limit).await;
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
    /// challenge: [`tollgate_core::respond::refusal`]). `reason` is the metric's reason when not the
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
            let why = match reason {
                Some("tarpit_overflow") => RefusalKind::TarpitOverflow,
                Some("challenge") => RefusalKind::Challenge,
                _ => RefusalKind::Limit,
            };
            if let Some(c) = r.series.refused(&self.shared.metrics, &r.name, pos, l, why) {
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
        use crate::limits::compiled::{ALLOWED, BLOCKED, REFUSED, SHADOW_REFUSED};
        let refused_any = v.denied.is_some() || v.blocked.is_some();
        let now = plan.now();
        let m = &self.shared.metrics;
        for (pos, &li) in rt.routes[route].cfg.limits.iter().enumerate() {
            let l = &rt.limits[li];
            let bit = 1u32 << pos;
            if v.refused & bit != 0 {
                let blocked = v.blocked.is_some_and(|(b, _)| b == li);
                l.decided(m, if blocked { BLOCKED } else { REFUSED }).inc();
                l.hot.refused(plan.key(pos), now);
            } else if v.shadow_exceeded & bit != 0 {
                l.decided(m, SHADOW_REFUSED).inc();
            } else if !refused_any && plan.took(pos).any() {
                l.decided(m, ALLOWED).inc();
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
        let r = &rt.routes[route];
        let metrics = &self.shared.metrics;
        if let Some(c) = pos.and_then(|p| {
            r.series
                .refused(metrics, &r.name, p, l, RefusalKind::Blocked)
        }) {
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
        let Some(slot) = tarpit.enter(r.series.tarpit_held(&self.shared.metrics, &r.name)) else {
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
        r.series.tarpit_total(&self.shared.metrics, &r.name).inc();
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
            let cfg = &rt.limits[li].cfg;
            let remaining = remaining.min(cfg.burst);
            ctx.ratelimit = Some((
                li,
                remaining,
                tollgate_core::respond::reset_secs(cfg, remaining, reset),
            ));
        }
        if v.shadow_exceeded != 0 {
            ctx.shadow_exceeded = true;
            let limits = &rt.routes[route].cfg.limits;
            for (pos, &li) in limits.iter().enumerate() {
                if v.shadow_exceeded & (1 << pos) != 0 {
                    let l = &rt.limits[li];
                    l.shadowed(&self.shared.metrics).inc();
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
    pub(crate) fn refund_unless_failure(
        &self,
        rt: &Runtime,
        units: &[(usize, u64, crate::limits::policy::Took)],
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
            crate::limits::policy::return_unit(l, key, t, took);
        }
    }
}

/// An answer made at the edge (a refusal, a redirect, a `respond`) on a route with shaping:
/// the route's response header rules, and its CORS fields once the CORS stage judged the
/// origin (a 429 a page can read).
pub(crate) fn edge_answer(
    s: &tollgate_core::filters::shaping::ShapingRt,
    ctx: &crate::ctx::Ctx,
    session: &pingora::proxy::Session,
    head: &mut tollgate_core::respond::Head,
) {
    if let (Some(c), Some(sc)) = (&s.cors, &ctx.shaping) {
        c.put_answer(head, &sc.allowed);
    }
    if let Some(r) = &s.response_rules {
        r.apply_head(head, &vars(ctx, session));
    }
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
