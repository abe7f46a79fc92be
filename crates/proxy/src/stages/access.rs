//! Stage 3, access lists: the route's own and `[access]`'s.
//!
//! Reads: the client address (through trusted proxies), the `User-Agent` and API-key header.
//! Writes: `ctx.client` (resolved once: the limit stage reuses it), `ctx.outcome`
//! (`AllowListed`: an allowed client skips the limits; `AccessDenied`).
//! Answers: 403 `ACCESS_DENIED`.
//! Entered only on a route with access lists ([`super::Stages::access`]).

use crate::answer::Step;
use crate::ctx::{Ctx, Outcome};
use crate::gateway::Gateway;
use crate::runtime::Runtime;
use pingora::prelude::*;
use tollgate_core::client_ip::client_ip;
use tollgate_core::filters::access::{Access, DenyReason};
use tollgate_core::respond::Problem;

pub async fn run(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    rt: &Runtime,
    route: usize,
) -> Result<Step> {
    let r = &rt.routes[route];
    let Some(access) = &r.access else {
        return Ok(Step::Next);
    };
    let req = session.req_header();
    let client = client_ip(ctx.peer, req, &rt.trusted_proxies);
    ctx.client = Some(client);
    match access.check(client, &req.headers) {
        Access::Unlisted => Ok(Step::Next),
        Access::Allowed(why) => {
            r.series
                .access_allowed(&gw.shared.metrics, &r.name, why as usize)
                .inc();
            ctx.outcome = Outcome::AllowListed;
            Ok(Step::Next)
        }
        Access::Denied(why) => {
            r.series.access_denied(&gw.shared.metrics, &r.name).inc();
            ctx.outcome = Outcome::AccessDenied;
            let detail = match why {
                DenyReason::Ip => "Requests from this address are not accepted.",
                DenyReason::UserAgent => "Requests from this client software are not accepted.",
            };
            gw.answer_problem(session, ctx, Problem::AccessDenied, detail)
                .await
        }
    }
}
