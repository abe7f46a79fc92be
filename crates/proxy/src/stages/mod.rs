//! The request as a pipeline of named stages (Pingora's `request_filter` phase).
//!
//! Each stage is one file with one entry point, `run`, that returns [`Step::Next`] (go on) or
//! [`Step::Answered`] (an answer was written at the edge: the request ends there). Each file's
//! top says what the stage reads, what it writes into the request's [`Ctx`] and which answers
//! it may give. In order (docs/where-things-are.md maps each to its files):
//!
//! 1. [`request`]: who asked and how: the request id, TLS, the connection's deadlines, the
//!    head's bounds.
//!    [`trace`]: the request's trace (`[tracing]` only): the client's context when trusted.
//! 2. [`route`]: the canonical request (path and host), its route (404), plaintext to HTTPS
//!    (308), the route's rewrite (400), and the inputs its keys read given once (400).
//!    [`body`]: the route's body cap on a declared length (413, before anything is read or an
//!    upstream chosen; a streamed body is counted against it as it comes).
//! 3. [`access`]: the route's access lists (403; an allow-listed client skips the limits).
//!    [`cors`]: a browser's preflight answered at the edge (204, never limited or proxied);
//!    an actual request's origin judged for its answer's CORS fields.
//! 4. [`auth`]: the route's authentication (401, 403, a sign-in redirect; 500/503 when its
//!    auth service fails): who the caller is, and whether they may pass.
//! 5. [`limits`]: the caller's identity (token, body fields, plan) and the route's limits and
//!    quotas (429, 403 blocked, 503, tarpit, challenge; a leaky bucket's hold). On a route
//!    whose limits count failures, an auth refusal is answered after them: a credential
//!    stuffer is counted, then refused (429 once over).
//! 6. [`action`]: the route's own answer, or the upstream it proxies to.
//!
//! A route pays only for the stages it uses: the pipeline below skips the access, auth and
//! limit stages on a route without lists, auth or limits (the route's
//! [`crate::runtime::route::Stages`], compiled when the runtime is built), and every stage returns at
//! once when its input is absent.
//!
//! What a route does to the request on its way up and to the answer on its way back (header
//! rules, the upstream's Host, CORS fields, compression, bandwidth) is [`tollgate_core::filters::shaping`],
//! applied in the proxy phases.
//!
//! New capabilities are new stages: a file here, a line in
//! [`run`], and a flag in [`crate::runtime::route::Stages`] when routes may go without it.

pub mod access;
pub mod action;
pub mod auth;
pub mod body;
pub mod cors;
pub mod limits;
pub mod request;
pub mod route;
pub mod trace;

use crate::ctx::{Ctx, Outcome};
use crate::gateway::Gateway;
use pingora::prelude::*;

use crate::answer::Step;

/// The whole request phase: every stage in order until one answers. `Ok(true)` when the
/// request was answered at the edge (Pingora's `request_filter` contract).
pub async fn run(gw: &Gateway, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
    let rt = gw.runtime();
    ctx.rt = Some(rt.clone());
    if request::run(gw, session, ctx, &rt).await? == Step::Answered {
        return Ok(true);
    }
    if let Some(t) = &rt.tracing {
        trace::run(session, ctx, t, &rt.trusted_proxies);
    }
    let route = match route::run(gw, session, ctx, &rt).await? {
        Some(route) => route,
        None => return Ok(true),
    };
    let r = &rt.routes[route];
    let stages = r.stages;
    if r.max_body > 0 && body::run(gw, session, ctx, r.max_body).await? == Step::Answered {
        return Ok(true);
    }
    if stages.access && access::run(gw, session, ctx, &rt, route).await? == Step::Answered {
        return Ok(true);
    }
    if stages.cors && cors::run(gw, session, ctx, &rt, route).await? == Step::Answered {
        return Ok(true);
    }
    if stages.auth {
        // Boxed: the auth stage's future (an auth service's exchange, a JWKS fetch) is large,
        // and held inline it would grow every request's future, on routes without auth too.
        return Box::pin(authenticated(gw, session, ctx, &rt, route)).await;
    }
    if stages.limits
        && ctx.outcome != Outcome::AllowListed
        && limits::run(gw, session, ctx, &rt, route).await? == Step::Answered
    {
        return Ok(true);
    }
    Ok(action::run(gw, session, ctx, &rt, route).await? == Step::Answered)
}

/// The rest of [`run`] on a route with auth: auth, the limits, an auth refusal kept for after
/// them (a route counting failures), the action.
async fn authenticated(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    rt: &std::sync::Arc<crate::runtime::Runtime>,
    route: usize,
) -> Result<bool> {
    let began = ctx.trace.as_ref().map(|_| std::time::Instant::now());
    let step = auth::run(gw, session, ctx, rt, route).await?;
    if let (Some(t), Some(a)) = (ctx.trace.as_mut(), began) {
        t.auth = Some((a, std::time::Instant::now()));
    }
    if step == Step::Answered {
        return Ok(true);
    }
    if rt.routes[route].stages.limits
        && ctx.outcome != Outcome::AllowListed
        && limits::run(gw, session, ctx, rt, route).await? == Step::Answered
    {
        return Ok(true);
    }
    if let Some(refusal) = ctx.auth.as_mut().and_then(|a| a.refusal.take()) {
        auth::refuse(gw, session, ctx, refusal).await?;
        return Ok(true);
    }
    Ok(action::run(gw, session, ctx, rt, route).await? == Step::Answered)
}
