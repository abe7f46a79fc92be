//! `logging` and `request_summary`: metrics, refunds that wait on the status, the trace's
//! spans, and the access log line when enabled.

use super::Gateway;
use crate::ctx::Ctx;
use crate::runtime::route::count_unrouted;
use pingora::prelude::*;

/// What Pingora's error lines say about a request: the method and the route, never the
/// path, query or a header (they may carry keys and tokens).
pub(super) fn request_summary(_gw: &Gateway, session: &Session, ctx: &Ctx) -> String {
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

pub(super) fn logging(gw: &Gateway, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
    let status = session
        .response_written()
        .map(|r| r.status.as_u16())
        .unwrap_or(0);
    if !ctx.refund_unless_failure.is_empty() {
        if let Some(rt) = &ctx.rt {
            gw.refund_unless_failure(rt, &ctx.refund_unless_failure, status);
        }
    }
    let elapsed = ctx.start.elapsed();
    let metrics = &gw.shared.metrics;
    match (&ctx.rt, ctx.route) {
        (Some(rt), Some(route)) => {
            let r = &rt.routes[route];
            r.count(metrics, status);
            r.series
                .duration(metrics, &r.name)
                .observe(elapsed.as_secs_f64());
        }
        _ => count_unrouted(metrics, status),
    }
    if let Some(t) = ctx.trace.as_deref() {
        gw.end_trace(session, e, ctx, t, status);
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
        let client = gw.shared.hasher.pseudonym(ctx.client.unwrap_or(ctx.peer));
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
        let upstream = ctx.upstream.map(|u| rt.upstreams[u].cfg().name.as_str());
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
