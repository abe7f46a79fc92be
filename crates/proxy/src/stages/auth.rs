//! Stage 4, auth: who the caller is, and whether they may pass (the route's `auth`).
//!
//! Reads: the request's credentials (a bearer token, basic credentials, an API key) or the
//! route's auth service's answer about the request; the client address (through trusted
//! proxies); the canonical path the route matched.
//! Writes: `ctx.client`; `ctx.auth`: the consumer (the `consumer` key source), the verified
//! claims (read by `jwt:` keys without verifying again), what goes upstream and to the client;
//! on a route whose limits count failures, the refusal, answered after the limits took their
//! unit.
//! Answers: 401 (`UNAUTHENTICATED`, `INVALID_TOKEN`, with `WWW-Authenticate`), 403
//! (`INSUFFICIENT_SCOPE`, `FORBIDDEN`), 302 to the auth service's sign-in page, 400
//! (`AMBIGUOUS_REQUEST`: a credential given twice), 500 (`AUTH_FAILED`) and 503
//! (`AUTH_UNAVAILABLE`): an auth service in trouble never lets a request through.
//! Entered only on a route with auth ([`super::Stages::auth`]).

use super::Step;
use crate::auth::{Refusal, Request};
use crate::ctx::{AuthCtx, Ctx, Outcome};
use crate::edge::Gateway;
use crate::identity::client_ip;
use crate::respond::names;
use crate::runtime::Runtime;
use bytes::Bytes;
use pingora::prelude::*;
use std::borrow::Cow;
use std::sync::Arc;

pub async fn run(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    rt: &Arc<Runtime>,
    route: usize,
) -> Result<Step> {
    let Some(ra) = &rt.routes[route].auth else {
        return Ok(Step::Next);
    };
    let head = session.req_header();
    let client = match ctx.client {
        Some(c) => c,
        None => client_ip(ctx.peer, head, &rt.trusted_proxies),
    };
    ctx.client = Some(client);
    let path = ctx.canonical_path.as_deref().unwrap_or(head.uri.path());
    let path_and_query: Cow<str> = match head.uri.query() {
        Some(q) => Cow::Owned(format!("{path}?{q}")),
        None => Cow::Borrowed(path),
    };
    // The host the route matched, when it names one (then the request's Host is that host,
    // with its port; a plain host name, checked, lower case).
    let host = rt.routes[route]
        .cfg
        .host
        .as_ref()
        .and_then(|_| crate::auth::forward::request_host(head));
    let req = Request {
        head,
        client,
        secure: ctx.secure,
        path_and_query: &path_and_query,
        host: host.as_deref(),
        request_id: ctx.request_id(),
        route: route as u32,
        metrics: &gw.shared.metrics,
        latency: &ra.latency,
    };
    match ra.auth.check(&req, rt.jwt.as_ref()).await {
        Ok((passed, outcome)) => {
            ra.counts[outcome as usize].inc();
            ctx.auth = Some(Box::new(AuthCtx {
                rt: ra.auth.clone(),
                passed,
                refusal: None,
            }));
            Ok(Step::Next)
        }
        Err(refusal) => {
            ra.counts[refusal.outcome() as usize].inc();
            let counted = matches!(
                refusal.outcome(),
                crate::auth::Outcome::Unauthenticated | crate::auth::Outcome::Forbidden
            );
            if counted && rt.routes[route].counts_failures && rt.routes[route].stages.limits {
                // The limits count this failure (and may refuse first): answered after them.
                ctx.auth = Some(Box::new(AuthCtx {
                    rt: ra.auth.clone(),
                    passed: crate::auth::Passed::default(),
                    refusal: Some(refusal),
                }));
                return Ok(Step::Next);
            }
            refuse(gw, session, ctx, refusal).await?;
            Ok(Step::Answered)
        }
    }
}

/// Answers an auth refusal.
pub async fn refuse(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    refusal: Refusal,
) -> Result<()> {
    ctx.outcome = Outcome::Unauthenticated;
    match refusal {
        Refusal::Problem {
            problem,
            detail,
            challenge,
        } => match challenge {
            Some(c) => {
                gw.problem(
                    session,
                    ctx,
                    problem,
                    &detail,
                    &[],
                    &[(&names::WWW_AUTHENTICATE, c)],
                )
                .await
            }
            None => gw.problem(session, ctx, problem, &detail, &[], &[]).await,
        },
        Refusal::SignIn { location, cookies } => {
            let mut head = Gateway::head(session, ctx, 302, "text/plain", 0)?;
            crate::respond::Fields::put(
                &mut head,
                &names::LOCATION,
                crate::respond::Value::Header(&location),
            );
            for c in &cookies {
                head.append(&names::SET_COOKIE, c);
            }
            gw.answer(session, ctx, head, Bytes::new()).await
        }
    }
}
