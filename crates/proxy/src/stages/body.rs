//! Stage 2b, the body cap: a request whose declared body is over the route's
//! `max_body_bytes` (or `[server]`'s) is refused before a byte of it is read or an upstream
//! is chosen.
//!
//! Reads: the route's cap; `Content-Length` (Pingora has already refused a malformed or
//! repeated one, and a `Content-Length` beside `Transfer-Encoding`).
//! Writes: `ctx.max_body`, which `request_body_filter` counts a chunked or HTTP/2 body
//! against as it streams (413 while nothing was answered; else the upstream request is
//! aborted and the connection closed).
//! Answers: 413 `BODY_TOO_LARGE`, and the connection is closed (its body is never read).

use crate::answer::Step;
use crate::ctx::Ctx;
use crate::gateway::Gateway;
use pingora::prelude::*;
use tollgate_core::respond::Problem;

pub async fn run(gw: &Gateway, session: &mut Session, ctx: &mut Ctx, cap: u64) -> Result<Step> {
    ctx.max_body = cap;
    match crate::inbound::declared_length(session.req_header()) {
        // No length: counted as it streams. A length that is not a number never gets here
        // (Pingora refuses it); should one, it is refused too.
        None => Ok(Step::Next),
        Some(Some(n)) if n <= cap => Ok(Step::Next),
        Some(_) => {
            too_large(gw, session, ctx).await?;
            Ok(Step::Answered)
        }
    }
}

/// 413 `BODY_TOO_LARGE`, the connection closed after it (the body is left unread).
pub async fn too_large(gw: &Gateway, session: &mut Session, ctx: &mut Ctx) -> Result<()> {
    if let (Some(rt), Some(r)) = (&ctx.rt, ctx.route) {
        let r = &rt.routes[r];
        r.series.body_refused(&gw.shared.metrics, &r.name).inc();
    }
    session.set_keepalive(None);
    let detail = format!(
        "The request body is larger than this route accepts ({} bytes).",
        ctx.max_body
    );
    gw.answer_problem(session, ctx, Problem::BodyTooLarge, &detail)
        .await
        .map(|_| ())
}
