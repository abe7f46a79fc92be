//! `request_body_filter`: the body cap on a streamed body, a concurrency slot's deadline and
//! `min_body_rate`.

use super::Gateway;
use crate::ctx::Ctx;
use bytes::Bytes;
use pingora::prelude::*;
use pingora::ErrorSource;
use std::time::Instant;

/// `min_body_rate`: once a body has been arriving for longer than `body_timeout`, it must
/// have averaged at least that rate. Each read may wait only as long as the bytes so far
/// keep the average (and never longer than `body_timeout`), so a dripping client is cut
/// off within `body_timeout` of falling behind, and its upstream connection released.
pub(super) fn request_body_filter(
    gw: &Gateway,
    session: &mut Session,
    body: &mut Option<Bytes>,
    end_of_stream: bool,
    ctx: &mut Ctx,
) -> Result<()> {
    // The copy holds at most what the cap lets through (over it, nothing is sent).
    super::mirror::body(gw, body.as_deref(), end_of_stream, ctx);
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
            let r = &rt.routes[r];
            r.series.body_refused(&gw.shared.metrics, &r.name).inc();
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
