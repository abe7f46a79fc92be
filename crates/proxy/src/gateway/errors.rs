//! `invalid_request_response` and `fail_to_proxy`: problem+json for a request Pingora could
//! not read (400, 408, 431) and for what could not be proxied (502 unreachable, 503
//! unresolved, 504 too slow, 413, 408).

use super::Gateway;
use crate::ctx::{new_request_id, Ctx};
use crate::inbound::client_gone;
use crate::runtime::route::count_unrouted;
use bytes::Bytes;
use http::HeaderValue;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::FailToProxy;
use pingora::ErrorSource;
use tollgate_core::respond::{header, names, Problem};

/// A request Pingora could not read (malformed 400, head too slow 408, too large 431):
/// problem+json like every other edge answer, and counted.
pub(super) fn invalid_request_response(
    gw: &Gateway,
    status: u16,
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
    count_unrouted(&gw.shared.metrics, problem.status());
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

/// The error of a route whose `timeouts.request` has passed (answered 504).
pub(super) fn past_deadline_error() -> Box<Error> {
    let mut e = Error::explain(ErrorType::ReadTimedout, "the route's request timeout");
    e.esource = ErrorSource::Upstream;
    e
}

/// The route's `timeouts.request`, counted from the request's arrival (`ctx.start`).
pub(super) fn route_deadline(ctx: &Ctx) -> Option<std::time::Duration> {
    let (Some(rt), Some(r)) = (&ctx.rt, ctx.route) else {
        return None;
    };
    rt.routes[r].cfg.timeouts.as_deref()?.request
}

/// Whether the route's `timeouts.request` has passed.
pub(super) fn past_deadline(ctx: &Ctx) -> bool {
    route_deadline(ctx).is_some_and(|d| ctx.start.elapsed() >= d)
}

pub(super) async fn fail_to_proxy(
    gw: &Gateway,
    session: &mut Session,
    e: &Error,
    ctx: &mut Ctx,
) -> FailToProxy {
    // No target because no name of the upstream resolves (yet): 503, not 502.
    let unresolved = *e.etype() == ErrorType::ConnectNoRoute
        && matches!((&ctx.rt, ctx.upstream), (Some(rt), Some(u)) if rt.upstreams[u].pool.is_empty());
    let problem = match e.etype() {
        _ if unresolved => Some(Problem::UpstreamUnresolved),
        // A wait the route's request timeout cut (a connect, a write): 504.
        ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout
            if e.esource() == &ErrorSource::Upstream && past_deadline(ctx) =>
        {
            Some(Problem::UpstreamTimeout)
        }
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
    // An error page kept for a bodiless upstream answer (error_pages): written here.
    if super::error_pages::is_page_instead(e) {
        let status = ctx
            .page
            .as_deref()
            .and_then(|p| p.head.as_ref())
            .map_or(0, |h| h.status.as_u16());
        let written = Box::pin(super::error_pages::instead_of_failure(
            gw, session, ctx, status,
        ))
        .await;
        return FailToProxy {
            error_code: if written { status } else { 0 },
            can_reuse_downstream: false,
        };
    }
    let mut code = 0;
    if let Some(p) = problem {
        code = p.status();
        // A route's error_pages may answer it instead (a page that cannot be had leaves
        // the problem as it is).
        // (Only the upstream's failures: a 413 or 408 says what the client did.)
        let paged = matches!(code, 502..=504)
            && session.response_written().is_none()
            && Box::pin(super::error_pages::instead_of_failure(
                gw, session, ctx, code,
            ))
            .await;
        if !paged && session.response_written().is_none() {
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
            if let Err(err) = gw.problem(session, ctx, p, detail, &[], &[]).await {
                tracing::debug!(error = %err, "could not send the error response");
            }
        }
    }
    FailToProxy {
        error_code: code,
        can_reuse_downstream: false,
    }
}
