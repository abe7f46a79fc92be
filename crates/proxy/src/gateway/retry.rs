//! `fail_to_connect`, `error_while_proxy`, `upstream_response_filter`: another target on a
//! failure the upstream's `retry` names (without one: on connect failure), the latency
//! that `ewma` weighs, and each attempt's answer or failure for passive outlier ejection
//! ([`tollgate_upstream::outlier`]).

/// An attempt on `addr` of `pool` failed: counted toward its ejection, which is logged and
/// counted when it happens.
fn outlier_failed(
    gw: &Gateway,
    pool: &tollgate_upstream::pool::Pool,
    addr: Option<std::net::SocketAddr>,
) {
    let Some(addr) = addr.filter(|_| pool.config().outlier.is_some()) else {
        return;
    };
    if let Some(e) = pool.failed(addr, std::time::Instant::now()) {
        gw.shared
            .metrics
            .upstream_ejections
            .with_label_values(&[pool.name()])
            .inc();
        tracing::warn!(
            event = "upstream_target_ejected",
            upstream = %pool.name(),
            target = %e.addr,
            failures = e.failures,
            seconds = e.lasts.as_secs(),
            times = e.times,
            "upstream target failed too many times in a row: out of rotation for a while (outlier ejection)"
        );
    }
}

use super::Gateway;
use crate::ctx::Ctx;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::ErrorSource;

pub(super) fn fail_to_connect(
    gw: &Gateway,
    peer: &HttpPeer,
    ctx: &mut Ctx,
    mut e: Box<Error>,
) -> Box<Error> {
    let Some((rt, u)) = ctx.rt.as_ref().zip(ctx.upstream) else {
        return e;
    };
    let pool = &rt.upstreams[u].pool;
    outlier_failed(gw, pool, peer._address.as_inet().copied());
    if let Some(p) = ctx.balance.as_ref().and_then(|b| b.pick.as_ref()) {
        // A target that cannot be reached is as slow as its connect timeout.
        p.observe(pool.config().connect_timeout.as_micros() as u64);
    }
    // Nothing was sent: the next target, whatever the method, body or retry policy.
    let retry = tollgate_upstream::attempt::may_fall_over(
        pool,
        ctx.balance.as_deref_mut(),
        ctx.tries,
        &gw.shared.metrics,
    );
    e.set_retry(retry);
    e
}

/// A failure after the connection: retried when `retry.on` names it (a timeout, or the
/// connection lost before a response head) and the request may be retried (see
/// [`tollgate_upstream::attempt::may_retry`]), or when a status was refused for a retry in
/// `upstream_response_filter`; otherwise Pingora's rule (an idempotent request on a reused
/// connection the upstream had closed).
pub(super) fn error_while_proxy(
    gw: &Gateway,
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
    // A wait the route's request timeout cut is the route's deadline, not the target's
    // fault: no ejection, no latency, and no retry (none could start).
    if super::errors::past_deadline(ctx) {
        e.set_retry(false);
        return e;
    }
    if let (Some(rt), Some(u)) = (&ctx.rt, ctx.upstream) {
        let pool = &rt.upstreams[u].pool;
        // The target's fault: it timed out, or lost a fresh connection (a pooled one it had
        // closed is the keep-alive race, not a failure of the target); and only before its
        // answer's head (`ctx.target` is taken then: a WebSocket or a stream that goes
        // quiet later is not a failure), with the client's whole body sent (one that
        // stalls its upload makes the upstream wait, and time out, by the client's doing).
        let target_failed = *e.esource() == ErrorSource::Upstream
            && match e.etype() {
                ErrorType::ReadTimedout | ErrorType::WriteTimedout => true,
                ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError => {
                    !client_reused
                }
                _ => false,
            };
        if target_failed && (session.is_body_empty() || session.is_body_done()) {
            if let Some(addr) = ctx.target.take() {
                outlier_failed(gw, pool, Some(addr));
            }
        }
        if let Some(p) = ctx.balance.as_ref().and_then(|b| b.pick.as_ref()) {
            if *e.etype() == ErrorType::ReadTimedout {
                p.observe(pool.config().read_timeout.as_micros() as u64);
            }
        }
        if pool.config().retry.is_some() && session.response_written().is_none() {
            let plain = retryable_request(session, ctx) && backoff_fits(ctx);
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
                    &gw.shared.metrics,
                )
            });
            if retry {
                e.set_retry(true);
                return e;
            }
        }
    }
    if !session.req_header().method.is_idempotent() || session.as_ref().retry_buffer_truncated() {
        e.set_retry(false);
    } else {
        e.retry.decide_reuse(client_reused);
    }
    e
}

/// `ewma`: the latency to the response head; `retry.on` statuses: an answer retried on
/// another target is dropped here, before a byte of it reaches the client.
pub(super) fn upstream_response_filter(
    gw: &Gateway,
    session: &mut Session,
    resp: &mut ResponseHeader,
    ctx: &mut Ctx,
) -> Result<()> {
    // An informational head (100 Continue) is not the answer yet.
    if resp.status.as_u16() >= 200 {
        if let Some(addr) = ctx.target.take() {
            outlier_answered(gw, ctx, addr, resp.status.as_u16());
        }
    }
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
    // Only 400 to 599 can be retried: the usual answer goes on without a lookup.
    let (Some(rt), Some(u), 400..) = (&ctx.rt, ctx.upstream, code) else {
        return Ok(());
    };
    let pool = &rt.upstreams[u].pool;
    if !pool.config().retry.is_some_and(|r| r.on.status(code)) {
        return Ok(());
    }
    let plain = retryable_request(session, ctx) && backoff_fits(ctx);
    if tollgate_upstream::attempt::may_retry(
        pool,
        ctx.balance.as_deref_mut(),
        plain,
        tollgate_upstream::attempt::Failure::Status(code),
        &gw.shared.metrics,
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

/// An attempt on `addr` answered `code`: a 5xx is a failure of the target, anything else
/// clears its failures in a row.
fn outlier_answered(gw: &Gateway, ctx: &Ctx, addr: std::net::SocketAddr, code: u16) {
    let Some((rt, u)) = ctx.rt.as_ref().zip(ctx.upstream) else {
        return;
    };
    let pool = &rt.upstreams[u].pool;
    if code >= 500 {
        outlier_failed(gw, pool, Some(addr));
    } else {
        pool.answered(addr);
    }
}

/// Whether a retry's `backoff` ends before the route's request timeout: one that would not
/// is never made, and the answer (or failure) in hand is the client's.
fn backoff_fits(ctx: &Ctx) -> bool {
    match (
        super::peer::retry_backoff(ctx),
        super::errors::route_deadline(ctx),
    ) {
        (Some(wait), Some(d)) => ctx.start.elapsed() + wait < d,
        _ => true,
    }
}

/// A request that may be sent again: idempotent, with no body (none declared, none passed on).
fn retryable_request(session: &mut Session, ctx: &Ctx) -> bool {
    session.req_header().method.is_idempotent() && ctx.body_bytes == 0 && session.is_body_empty()
}
