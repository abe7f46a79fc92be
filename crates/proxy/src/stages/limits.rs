//! Stage 5, limits and quotas: who the caller is to the route's limits, and what they say.
//!
//! Reads: the client address (through trusted proxies; the access or auth stage's when one
//! ran), the verified bearer token's claims (`jwt:` keys; the auth stage's when it verified
//! one), the consumer the auth stage named (`consumer` keys), the body's fields (`body:` keys, read up to
//! `key_body_limit` and kept for the upstream), the caller's plan, the path and query the
//! upstream will read (the rewritten target when the route rewrites), the limits' state here
//! and in Redis.
//! Writes: `ctx.client`, `ctx.outcome` and `ctx.outcome_limit`, `ctx.plan`, the RateLimit
//! fields to answer with (`ctx.ratelimit`, `ctx.quota_warning`), `ctx.shadow_exceeded`,
//! the concurrency slots held (`ctx.slots`, `ctx.slot_deadline`), the units to give back
//! unless the response is a failure (`ctx.refund_unless_failure`); the ladders' counts.
//! Answers: 401 `INVALID_TOKEN` (a token that does not verify), 400 (a body a key cannot be
//! read from, a key field given twice), 429 (`RATE_LIMIT_EXCEEDED`, `QUOTA_EXCEEDED`, a
//! tarpit's overflow, a challenge), 403 `TEMPORARILY_BLOCKED`, 503 (a global limit with
//! `on_error = "closed"` that cannot be decided). A tarpit may hold the request then let it
//! pass; a leaky bucket's queue holds it before it goes on.
//! Entered only on a route with limits ([`super::Stages::limits`]) for a client no access
//! list allowed.

use crate::answer::Step;
use crate::ctx::{Ctx, Outcome};
use crate::gateway::Gateway;
use crate::inbound::read_key_body;
use crate::limits::identity::KeyInput;
use crate::limits::identity::ParsedBody;
use crate::limits::policy::{decide_global, decide_local, Plan, Verdict};
use crate::runtime::Runtime;
use http::HeaderValue;
use pingora::prelude::*;
use std::borrow::Cow;
use std::time::Instant;
use tollgate_auth::jwt::Claims;
use tollgate_auth::jwt::Verifier;
use tollgate_core::client_ip::client_ip;
use tollgate_core::respond::{names, Problem};

pub async fn run(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    rt: &std::sync::Arc<Runtime>,
    route: usize,
) -> Result<Step> {
    let req = session.req_header();
    // Resolved once: the access check may have done it already.
    let client = match ctx.client {
        Some(c) => c,
        None => client_ip(ctx.peer, req, &rt.trusted_proxies),
    };
    ctx.client = Some(client);
    ctx.outcome = Outcome::Allowed;
    let Some((claims, body)) = identify(gw, session, ctx, rt, route).await? else {
        return Ok(Step::Answered);
    };
    let req = session.req_header();
    // The path (and query) the upstream will read; on a case-insensitive route one key
    // for every case.
    let (path, query) = match &ctx.upstream_target {
        Some(t) => (t.path(), t.query()),
        None => (
            ctx.canonical_path.as_deref().unwrap_or(req.uri.path()),
            req.uri.query(),
        ),
    };
    let route_path = if rt.routes[route].cfg.case_insensitive {
        Cow::Owned(path.to_ascii_lowercase())
    } else {
        Cow::Borrowed(path)
    };
    let client_cert = session
        .digest()
        .and_then(|d| d.ssl_digest.as_deref())
        .map(|t| t.cert_digest.as_slice())
        .filter(|d| !d.is_empty());
    let input = KeyInput {
        req,
        client_cert,
        client_ip: client,
        path: &route_path,
        query,
        route: route as u32,
        // Verified by the auth stage, or here for the route's jwt: keys.
        // (Field by field: ctx.plan is written below while these are read.)
        claims: ctx
            .auth
            .as_ref()
            .and_then(|a| a.passed.claims.as_deref())
            .or(claims.as_ref()),
        body: body.as_ref(),
        consumer: ctx.auth.as_ref().and_then(|a| a.passed.consumer.as_deref()),
        descriptor: None,
    };
    if let (true, Some(plans)) = (rt.routes[route].needs_plan, &rt.config.plans) {
        ctx.plan = crate::limits::identity::plan_of(plans, &input);
    }
    let clock = &gw.shared.clock;
    let mut plan = decide_local(
        &**rt,
        route,
        &gw.shared.hasher,
        &input,
        ctx.plan,
        clock.now(),
        // Calendar time is read only where a quota needs it.
        if rt.routes[route].needs_calendar {
            clock.unix_now()
        } else {
            0
        },
    );
    let verdict = match plan.settled() {
        Some(v) => v,
        None => {
            let began = ctx.trace.as_ref().map(|_| Instant::now());
            let v = decide_global(&**rt, &mut plan, &*gw.shared.clock).await;
            if let (Some(t), Some(a)) = (ctx.trace.as_mut(), began) {
                t.redis = Some((a, Instant::now()));
            }
            v
        }
    };
    answer_or_admit(gw, session, ctx, rt, route, &plan, &verdict).await
}

/// The caller's verified token (its claims) and body fields, when the route's keys read them;
/// `None` when the request was answered (401 for a token that does not verify, 400 for a body
/// a key cannot be read from or a key field given twice).
async fn identify(
    gw: &Gateway,
    session: &mut Session,
    ctx: &Ctx,
    rt: &Runtime,
    route: usize,
) -> Result<Option<(Option<Claims>, Option<ParsedBody>)>> {
    let req = session.req_header();
    let mut claims = None;
    // (A token the auth stage verified is not verified again.)
    if let (true, None, Some(v)) = (rt.routes[route].needs_jwt, ctx.claims(), &rt.jwt) {
        if let Some(token) = req
            .headers
            .get(&v.header)
            .and_then(|h| Verifier::token(h.as_bytes()))
        {
            match v.check(token, &gw.shared.metrics).await {
                Ok(c) => claims = Some(c),
                Err(why) => {
                    gw.problem(
                        session,
                        ctx,
                        Problem::InvalidToken,
                        why,
                        &[],
                        &[(
                            &names::WWW_AUTHENTICATE,
                            HeaderValue::from_static("Bearer error=\"invalid_token\""),
                        )],
                    )
                    .await?;
                    return Ok(None);
                }
            }
        }
    }
    let mut body = None;
    if rt.routes[route].needs_body {
        match read_key_body(session, rt.config.server.key_body_limit).await {
            Ok(b) => body = b,
            Err((p, why)) => {
                gw.problem(session, ctx, p, why, &[], &[]).await?;
                return Ok(None);
            }
        }
        let repeated = body
            .as_ref()
            .and_then(|b| rt.routes[route].body_fields.iter().find(|f| b.repeated(f)));
        if let Some(field) = repeated {
            let detail = format!(
                "The body field \"{field}\" is given more than once; this route reads it to identify the caller, so it must be given once."
            );
            gw.problem(session, ctx, Problem::AmbiguousRequest, &detail, &[], &[])
                .await?;
            return Ok(None);
        }
    }
    Ok(Some((claims, body)))
}

/// Turns the verdict into the request's fate: counted, climbed on the ladders, answered (403
/// blocked, 429 or a tarpit, 503), or admitted with its RateLimit fields, its concurrency slots
/// and the units to give back unless it fails, after a leaky bucket's hold.
async fn answer_or_admit(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    rt: &std::sync::Arc<Runtime>,
    route: usize,
    plan: &Plan,
    verdict: &Verdict,
) -> Result<Step> {
    gw.count_decisions(rt, route, plan, verdict);
    if verdict.refused != 0 {
        gw.climb_ladders(rt, route, plan, verdict.refused);
    }
    if let Some((limit, wait)) = verdict.blocked {
        (ctx.outcome, ctx.outcome_limit) = (Outcome::Blocked, Some(limit));
        gw.blocked(session, ctx, rt, route, limit, plan, wait)
            .await?;
        return Ok(Step::Answered);
    }
    if let Some((limit, wait)) = verdict.denied {
        (ctx.outcome, ctx.outcome_limit) = (Outcome::Refused, Some(limit));
        if gw.over_limit(session, ctx, rt, route, limit, wait).await? {
            return Ok(Step::Answered);
        }
        // A tarpit that passes requests on after their hold: on to the upstream.
    } else {
        if let Some(limit) = verdict.unavailable {
            (ctx.outcome, ctx.outcome_limit) = (Outcome::Unavailable, Some(limit));
            gw.unavailable(session, ctx, rt, route, limit).await?;
            return Ok(Step::Answered);
        }
        ctx.outcome_limit = verdict.nearest.map(|(l, _, _)| l);
        gw.note_verdict(ctx, rt, route, verdict, plan);
        // The shortest slot_timeout of the slots taken: counted once the request is
        // passed on (after a leaky bucket's hold below: the gateway's own queue is not
        // the client's time).
        let mut slot_timeout: Option<std::time::Duration> = None;
        if rt.routes[route].holds_slots {
            let mut slots = crate::limits::slots::Slots::new(rt.clone(), gw.shared.clock.clone());
            for (pos, &li) in rt.routes[route].cfg.limits.iter().enumerate() {
                let took = plan.took(pos);
                let cfg = &rt.limits[li].cfg;
                if cfg.algorithm.caps().holds && took.any() {
                    slots.push(li, plan.key(pos), took);
                    if let Some(t) = cfg.slot_timeout {
                        slot_timeout = Some(slot_timeout.map_or(t, |s| s.min(t)));
                    }
                }
            }
            ctx.slots = Some(slots);
        }
        if rt.routes[route].counts_failures {
            for (pos, &li) in rt.routes[route].cfg.limits.iter().enumerate() {
                let took = plan.took(pos);
                if rt.limits[li].cfg.count_failures.is_some() && took.any() {
                    ctx.refund_unless_failure.push((li, plan.key(pos), took));
                }
            }
        }
        if verdict.delay > 0 {
            // A leaky bucket's queue: held without a thread, then passed on at the rate.
            tokio::time::sleep(std::time::Duration::from_nanos(verdict.delay)).await;
        }
        if let Some(t) = slot_timeout {
            ctx.slot_deadline = Some(Instant::now() + t);
            // The body's first read waits no longer than the slot may be held.
            session.set_read_timeout(Some(rt.config.server.hardening.body_timeout.min(t)));
        }
    }
    Ok(Step::Next)
}
