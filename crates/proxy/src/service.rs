//! The request phases (Pingora's `ProxyHttp`): route, identify, limit, answer or proxy.
//!
//! Phase by phase:
//! - `request_filter`: request id, route (404 if none), client address, limits (429 if refused),
//!   built-in responders. Answers written here end the request (`Ok(true)`).
//! - `upstream_peer`: the next healthy target of the chosen upstream's pool, round robin or by
//!   its policy and affinity cookie (none healthy: 502; a name that never resolved: 503, from
//!   `fail_to_proxy`).
//! - `upstream_request_filter`: X-Request-Id, X-Forwarded-For, X-Forwarded-Proto and the shadow
//!   marker toward the upstream; a client cannot forge the marker.
//! - `response_filter`: X-Request-Id and the RateLimit fields toward the client.
//! - `fail_to_connect`, `error_while_proxy`, `upstream_response_filter`: another target on a
//!   failure the upstream's `retry` names (without one: on connect failure); problem+json from
//!   `fail_to_proxy` for what cannot be proxied (502 unreachable, 504 too slow).
//! - `logging`: metrics, and the access log line when enabled.

use crate::ctx::{new_request_id, Ctx};
use crate::edge::{client_gone, push_ip, Gateway};
use crate::runtime::count_unrouted;
use async_trait::async_trait;
use bytes::Bytes;
use http::HeaderValue;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::FailToProxy;
use pingora::ErrorSource;
use std::time::Instant;
use tollgate_core::client_ip::trusted;
use tollgate_core::respond::{header, names, Problem};

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

    async fn upstream_peer(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        // Chosen by request_filter for every request that gets here.
        let (Some(rt), Some(u)) = (&ctx.rt, ctx.upstream) else {
            return Err(Error::explain(
                ErrorType::InternalError,
                "no upstream in context",
            ));
        };
        ctx.tries += 1;
        let pool = &rt.upstreams[u].pool;
        let peer = if pool.chooses() {
            // A policy, affinity or retries: the pick is kept for its whole attempt.
            let rt = rt.clone();
            let client = ctx.client.unwrap_or(ctx.peer);
            let b = ctx.balance.get_or_insert_with(Default::default);
            tollgate_upstream::attempt::attempt(
                &rt.upstreams[u].pool,
                session.req_header(),
                client,
                ctx.canonical_path.as_deref(),
                b,
                ctx.tries == 1,
            )
        } else {
            pool.select_peer()
        };
        let Some(peer) = peer else {
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
        let Some((rt, u)) = ctx.rt.as_ref().zip(ctx.upstream) else {
            return e;
        };
        let pool = &rt.upstreams[u].pool;
        if let Some(p) = ctx.balance.as_ref().and_then(|b| b.pick.as_ref()) {
            // A target that cannot be reached is as slow as its connect timeout.
            p.observe(pool.config().connect_timeout.as_micros() as u64);
        }
        // Nothing was sent: the next target, whatever the method, body or retry policy.
        let retry = tollgate_upstream::attempt::may_fall_over(
            pool,
            ctx.balance.as_deref_mut(),
            ctx.tries,
            &self.shared.metrics,
        );
        e.set_retry(retry);
        e
    }

    /// A failure after the connection: retried when `retry.on` names it (a timeout, or the
    /// connection lost before a response head) and the request may be retried (see
    /// [`tollgate_upstream::attempt::may_retry`]), or when a status was refused for a retry in
    /// `upstream_response_filter`; otherwise Pingora's rule (an idempotent request on a reused
    /// connection the upstream had closed).
    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut Ctx,
        client_reused: bool,
    ) -> Box<Error> {
        let mut e = e.more_context(format!("Peer: {peer}"));
        let decided_status = matches!(e.etype(), ErrorType::HTTPStatus(_))
            && *e.esource() == ErrorSource::Upstream
            && e.retry();
        if decided_status {
            return e;
        }
        if let (Some(rt), Some(u)) = (&ctx.rt, ctx.upstream) {
            let pool = &rt.upstreams[u].pool;
            if let Some(p) = ctx.balance.as_ref().and_then(|b| b.pick.as_ref()) {
                if *e.etype() == ErrorType::ReadTimedout {
                    p.observe(pool.config().read_timeout.as_micros() as u64);
                }
            }
            if pool.config().retry.is_some() && session.response_written().is_none() {
                let plain = retryable_request(session, ctx);
                let upstream = *e.esource() == ErrorSource::Upstream;
                let answered = ctx.balance.as_ref().is_some_and(|b| b.answered);
                let why = match e.etype() {
                    ErrorType::ReadTimedout | ErrorType::WriteTimedout if upstream => {
                        Some(tollgate_upstream::attempt::Failure::Timeout)
                    }
                    // On a pooled connection the upstream had closed, Pingora's own rule below
                    // sends an idempotent request again, spending nothing: only a fresh
                    // connection's loss is ours to retry.
                    ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
                        if upstream && !answered && !client_reused =>
                    {
                        Some(tollgate_upstream::attempt::Failure::Reset)
                    }
                    _ => None,
                };
                let retry = why.is_some_and(|why| {
                    tollgate_upstream::attempt::may_retry(
                        pool,
                        ctx.balance.as_deref_mut(),
                        plain,
                        why,
                        &self.shared.metrics,
                    )
                });
                if retry {
                    e.set_retry(true);
                    return e;
                }
            }
        }
        if !session.req_header().method.is_idempotent() || session.as_ref().retry_buffer_truncated()
        {
            e.set_retry(false);
        } else {
            e.retry.decide_reuse(client_reused);
        }
        e
    }

    /// `ewma`: the latency to the response head; `retry.on` statuses: an answer retried on
    /// another target is dropped here, before a byte of it reaches the client.
    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let Some(b) = ctx.balance.as_deref_mut() else {
            return Ok(());
        };
        b.answered = true;
        let b = &*b;
        let code = resp.status.as_u16();
        if let Some(p) = &b.pick {
            let took = p.started.elapsed().as_micros() as u64;
            // A quick 5xx is no fast target: it weighs as a second at least.
            p.observe(if code >= 500 {
                took.max(1_000_000)
            } else {
                took
            });
        }
        if !matches!(code, 502..=504) {
            return Ok(());
        }
        let (Some(rt), Some(u)) = (&ctx.rt, ctx.upstream) else {
            return Ok(());
        };
        let pool = &rt.upstreams[u].pool;
        let plain = retryable_request(session, ctx);
        if tollgate_upstream::attempt::may_retry(
            pool,
            ctx.balance.as_deref_mut(),
            plain,
            tollgate_upstream::attempt::Failure::Status(code),
            &self.shared.metrics,
        ) {
            let mut e = Error::explain(
                ErrorType::HTTPStatus(code),
                "upstream answered a status retry.on names",
            );
            e.esource = ErrorSource::Upstream;
            e.set_retry(true);
            return Err(e);
        }
        Ok(())
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        // Kept underscores (`underscores_in_headers = true`): a client's `X_Forwarded_For`
        // would shadow the gateway's `X-Forwarded-For` in CGI, WSGI, Rack and PHP.
        if ctx
            .rt
            .as_ref()
            .is_some_and(|rt| rt.config.server.underscores_in_headers)
        {
            tollgate_core::filters::headers::remove_spellings(upstream, |k| {
                GATEWAY_WRITES
                    .iter()
                    .any(|n| tollgate_core::filters::headers::underscore_spelling(k, n))
            });
        }
        // The route's header rules first: what the gateway writes below always wins.
        let shaping = match (&ctx.rt, ctx.route) {
            (Some(rt), Some(r)) => rt.routes[r].shaping.as_deref(),
            _ => None,
        };
        if let Some(s) = shaping {
            s.request(upstream, &crate::edge::vars(ctx, session))?;
        }
        upstream.insert_static_header(&names::X_REQUEST_ID, ctx.request_id.clone());
        if let Some(t) = ctx.trace.as_mut() {
            trace_context(t, upstream);
        }
        target_line(ctx, upstream)?;
        forwarded(session, ctx, upstream)?;
        if let Some(a) = &ctx.auth {
            auth_headers(a, upstream)?;
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
        // The route's header rules, CORS fields and compression first: the fields the
        // gateway writes below always win.
        if let (Some(rt), Some(r)) = (&ctx.rt, ctx.route) {
            if let Some(s) = rt.routes[r].shaping.as_deref() {
                let kept = ctx.shaping.take();
                let vars = crate::edge::vars(ctx, session);
                let count = |sc: &tollgate_core::filters::shaping::ShapingCtx| {
                    if let Some(enc) = sc.encoding() {
                        self.shared
                            .metrics
                            .compressed
                            .with_label_values(&[&rt.routes[r].name, enc])
                            .inc();
                    }
                };
                match kept {
                    Some(mut sc) => {
                        sc.response(s, session.req_header(), resp, &vars);
                        count(&sc);
                        ctx.shaping = Some(sc);
                    }
                    // Nothing for the body to do (no compression, no bandwidth, no CORS
                    // origin): the response state lives on the stack, nothing allocated.
                    None if !s.shapes_body() => {
                        tollgate_core::filters::shaping::ShapingCtx::default().response(
                            s,
                            session.req_header(),
                            resp,
                            &vars,
                        );
                    }
                    None => {
                        let mut sc = Box::<tollgate_core::filters::shaping::ShapingCtx>::default();
                        sc.response(s, session.req_header(), resp, &vars);
                        count(&sc);
                        ctx.shaping = Some(sc);
                    }
                }
            }
        }
        resp.insert_static_header(&names::X_REQUEST_ID, ctx.request_id.clone());
        if let Some(v) = &ctx.hsts {
            resp.insert_static_header(&names::STRICT_TRANSPORT_SECURITY, v.clone());
        }
        if resp.status == http::StatusCode::SWITCHING_PROTOCOLS {
            // An upgraded connection is not bound by the body deadlines.
            session.set_read_timeout(None);
        }
        ctx.add_limit_headers(resp);
        if let Some(b) = ctx.balance.as_deref() {
            pin(ctx, b, resp)?;
        }
        if let Some(a) = &ctx.auth {
            for c in &a.passed.cookies {
                resp.append_header(http::header::SET_COOKIE, c.clone())?;
            }
        }
        Ok(())
    }

    /// Compression and `limit_rate` on a route with them; never on an upgraded connection (a
    /// WebSocket's frames are not a download: pacing them would only add latency).
    fn response_body_filter(
        &self,
        session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<std::time::Duration>> {
        let (Some(sc), Some(rt), Some(r)) = (ctx.shaping.as_deref_mut(), &ctx.rt, ctx.route) else {
            return Ok(None);
        };
        if session.was_upgraded() {
            return Ok(None);
        }
        match rt.routes[r].shaping.as_deref() {
            Some(s) => Ok(sc.body(s, body, end_of_stream)),
            None => Ok(None),
        }
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
        if ctx.max_body > 0 && ctx.body_bytes > ctx.max_body {
            // Over the cap: this chunk is never sent. Nothing answered yet: 413 (see
            // fail_to_proxy); else the upstream request is aborted, the connection closed.
            *body = None;
            if let Some(r) = ctx.route {
                rt.routes[r].body_refused.inc();
            }
            let mut e = Error::explain(
                ErrorType::HTTPStatus(413),
                "the request body went over max_body_bytes",
            );
            e.esource = ErrorSource::Downstream;
            return Err(e);
        }
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
            ErrorType::HTTPStatus(413) => Some(Problem::BodyTooLarge),
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
                    Problem::BodyTooLarge => {
                        "The request body is larger than this route accepts (max_body_bytes)."
                    }
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
        if let Some(t) = ctx.trace.as_deref() {
            self.end_trace(session, e, ctx, t, status);
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
            // With access_log_paths: the host and the path as routed (canonical; never the
            // query, which can carry secrets), for `tollgate simulate`; with [tracing], the
            // trace. A field that is `None` is left out of the line.
            let paths = rt.is_some_and(|rt| rt.config.server.access_log_paths);
            let host = paths.then(|| {
                req.headers
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .or(req.uri.host())
                    .unwrap_or("")
            });
            let path = paths.then(|| ctx.canonical_path.as_deref().unwrap_or(req.uri.path()));
            let trace_id = ctx.trace.as_ref().map(|t| t.id_hex());
            tracing::info!(
                event = "request",
                request_id = %ctx.request_id(),
                method = %req.method,
                host,
                path,
                route,
                status,
                duration_ms = elapsed.as_secs_f64() * 1000.0,
                decision = ctx.outcome.name(),
                limit,
                shadow_exceeded = ctx.shadow_exceeded,
                client = %format_args!("{client:016x}"),
                upstream_tries = ctx.tries,
                error = error.as_deref().unwrap_or(""),
                trace_id = trace_id.as_deref(),
            );
        }
    }
}

impl Gateway {
    /// The request's spans, queued for export when it is sampled (or refused, with
    /// `sample_refusals`).
    fn end_trace(
        &self,
        session: &Session,
        e: Option<&Error>,
        ctx: &Ctx,
        t: &tollgate_core::observe::traces::TraceCtx,
        status: u16,
    ) {
        let Some(rt) = &ctx.rt else { return };
        let Some(tr) = &rt.tracing else { return };
        let refused = matches!(
            ctx.outcome,
            crate::ctx::Outcome::Refused
                | crate::ctx::Outcome::Blocked
                | crate::ctx::Outcome::AccessDenied
                | crate::ctx::Outcome::TarpitOverflow
                | crate::ctx::Outcome::Challenged
                | crate::ctx::Outcome::Unavailable
                | crate::ctx::Outcome::Unauthenticated
        );
        if !(t.sampled || refused && tr.cfg.sample_refusals) {
            return;
        }
        // Nothing is built for spans that would be dropped: a full queue, or refusals past
        // their cap (a client can be refused at will; it cannot make the gateway trace it).
        let n = t.span_count();
        let queue = &self.shared.spans;
        if !queue.room(n, tr.cfg.max_queue, &self.shared.metrics)
            || (!t.sampled && !queue.refusal_allowed(n, &self.shared.metrics))
        {
            return;
        }
        let req = session.req_header();
        let route = ctx.route.map(|r| &*rt.routes[r].name).unwrap_or("");
        let limit = ctx
            .outcome_limit
            .map(|l| rt.limits[l].cfg.name.as_str())
            .unwrap_or("");
        let client = ctx.client.unwrap_or(ctx.peer);
        let upstream = ctx.upstream.map(|u| rt.upstreams[u].cfg.name.as_str());
        let finished = tollgate_core::observe::traces::Finished {
            method: req.method.as_str(),
            path: ctx.canonical_path.as_deref().unwrap_or(req.uri.path()),
            host: req
                .headers
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .or(req.uri.host()),
            route,
            status,
            decision: ctx.outcome.name(),
            limit,
            client: tollgate_core::observe::traces::client_text(
                tr.cfg.client_address,
                client,
                || self.shared.hasher.pseudonym(client),
            ),
            request_id: ctx.request_id(),
            upstream,
            tries: ctx.tries as u32,
            error: e.map(|e| e.etype().as_str().to_string()),
            end: std::time::Instant::now(),
        };
        let spans = tollgate_core::observe::traces::spans(t, &finished);
        self.shared
            .spans
            .push(spans, tr.cfg.max_queue, &self.shared.metrics);
    }
}

/// The fields the gateway itself writes on every upstream request (with dashes: the ones a
/// client's underscore spelling could shadow).
const GATEWAY_WRITES: [&str; 5] = [
    "x-request-id",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-prefix",
    "x-ratelimit-shadow-exceeded",
];

/// A request that may be sent again: idempotent, with no body (none declared, none passed on).
fn retryable_request(session: &mut Session, ctx: &Ctx) -> bool {
    session.req_header().method.is_idempotent() && ctx.body_bytes == 0 && session.is_body_empty()
}

/// Affinity: the client is (re)pinned to the target that answered unless its cookie named it.
fn pin(
    ctx: &Ctx,
    b: &tollgate_upstream::attempt::BalanceCtx,
    resp: &mut ResponseHeader,
) -> Result<()> {
    let (Some(rt), Some(u), Some(p)) = (&ctx.rt, ctx.upstream, &b.pick) else {
        return Ok(());
    };
    if let Some(a) = &rt.upstreams[u].pool.affinity {
        if b.pinned != Some(p.target.id) {
            resp.append_header(
                http::header::SET_COOKIE,
                a.set_cookie(p.target.id, ctx.secure),
            )?;
        }
    }
    Ok(())
}

/// The trace context the upstream continues: under the gateway's upstream span; a context
/// the gateway did not take is not passed on.
fn trace_context(t: &mut tollgate_core::observe::traces::TraceCtx, upstream: &mut RequestHeader) {
    upstream.insert_static_header(&names::TRACEPARENT, t.upstream_traceparent());
    match &t.tracestate {
        Some(ts) => upstream.insert_static_header(&names::TRACESTATE, ts.clone()),
        None if t.client_tracestate => {
            upstream.remove_header(names::TRACESTATE.name());
        }
        None => {}
    }
    // Only a sampled request's upstream span is ever exported (a refusal never
    // reaches the upstream).
    if t.sampled {
        t.upstream.get_or_insert_with(std::time::Instant::now);
    }
}

/// The target line the upstream reads: the route's rewrite (its query in it already), else
/// the canonical path the gateway routed on with the query as it came; and the Host the
/// target names when the client sent none.
fn target_line(ctx: &Ctx, upstream: &mut RequestHeader) -> Result<()> {
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
    Ok(())
}

/// X-Forwarded-For (every prior value in order, then the peer, in one buffer) and
/// X-Forwarded-Proto (kept only from a trusted proxy).
fn forwarded(session: &Session, ctx: &Ctx, upstream: &mut RequestHeader) -> Result<()> {
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
        upstream.insert_static_header(&names::X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    }
    Ok(())
}

/// What the route's auth owns: the client's copies (in every spelling) never reach the
/// upstream, then the auth's own values (claims, the auth service's headers); a key read
/// from the query leaves the target line.
fn auth_headers(a: &crate::ctx::AuthCtx, upstream: &mut RequestHeader) -> Result<()> {
    for name in &a.rt.owned {
        upstream.remove_header(name);
    }
    // Other spellings of them too: CGI, WSGI, Rack and PHP read `X_User_Id` as
    // `X-User-Id` (HTTP_X_USER_ID).
    if !a.rt.owned.is_empty() {
        tollgate_core::filters::headers::remove_spellings(upstream, |k| {
            a.rt.owned
                .iter()
                .any(|o| tollgate_core::filters::headers::underscore_spelling(k, o.as_str()))
        });
    }
    for (name, value) in &a.passed.headers {
        upstream.append_header(name.clone(), value.clone())?;
    }
    // A key read from the query leaves the target line (and so every upstream log).
    if let Some(q) = &a.rt.strip_query {
        if let Some(target) = tollgate_auth::api_key::strip_param(upstream.raw_path(), q) {
            upstream.set_raw_path(&target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::edge::{forwarded_https, https_location, push_ip};
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
