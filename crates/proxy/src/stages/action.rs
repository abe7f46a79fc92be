//! Stage 6, the action: the route's own answer, or the upstream it proxies to.
//!
//! Reads: the route's action (`respond` or `upstream`), its canary and the request's headers
//! and cookies (the canary's choice), its `backends` split.
//! Writes: `ctx.upstream`, chosen once for every try of the request (the route's upstream or
//! its canary's; its `default_backend` while that has no targets).
//! Answers: the route's `respond` (its status, body and `Location`); a split's
//! `{ status = 500 }` share (`500 INTERNAL`).

use crate::answer::Step;
use crate::ctx::Ctx;
use crate::gateway::Gateway;
use crate::runtime::Runtime;
use bytes::Bytes;
use http::HeaderValue;
use pingora::prelude::*;
use tollgate_config::model::RouteAction;
use tollgate_core::respond::{names, Fields, Problem, Value};

pub async fn run(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    rt: &Runtime,
    route: usize,
) -> Result<Step> {
    match rt.route_action(route) {
        RouteAction::Respond {
            status,
            body,
            location,
        } => {
            let body = Bytes::copy_from_slice(body.as_bytes());
            let mut head = Gateway::head(
                session,
                ctx,
                *status,
                "text/plain; charset=utf-8",
                body.len(),
            )?;
            if let Some(l) = location {
                // Checked at load: visible ASCII.
                if let Ok(v) = HeaderValue::from_str(l) {
                    head.put(&names::LOCATION, Value::Header(&v));
                }
            }
            gw.answer(session, ctx, head, body).await?;
            Ok(Step::Answered)
        }
        RouteAction::Upstream(u) => {
            let req = session.req_header();
            let r = &rt.routes[route];
            let mut chosen = match (&r.canary, &r.cfg.split) {
                (Some(c), _) if c.chooses(&req.headers, |n| fastrand::u32(..n)) => c.upstream,
                (_, Some(split)) => {
                    let roll = fastrand::u32(..split.total);
                    match tollgate_route::matching::split_choice(split, roll) {
                        Some(u) => u,
                        None => {
                            let detail = "this share of the route's requests goes to a backend that cannot be used";
                            return gw
                                .answer_problem(session, ctx, Problem::Internal, detail)
                                .await;
                        }
                    }
                }
                _ => *u,
            };
            // `default_backend`: while the upstream has no targets (a Service scaled to
            // zero), one that has takes its requests.
            if let Some(d) = r.cfg.fallback.as_ref().and_then(|f| f.default_backend) {
                if rt.upstreams[chosen].pool.is_empty() && !rt.upstreams[d].pool.is_empty() {
                    chosen = d;
                }
            }
            // (An upstream none of whose names resolves is found when its peer is asked for,
            // off this path: see fail_to_proxy.)
            ctx.upstream = Some(chosen);
            Ok(Step::Next)
        }
    }
}
