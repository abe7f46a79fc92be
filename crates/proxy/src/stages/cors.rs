//! Stage 3b, CORS: a browser's preflight is answered here, before auth and limits (it
//! carries no credentials, and a 429 to it is one the page can never read); an actual
//! request's `Origin` is judged once for its answer.
//!
//! Reads: the route's `cors`; `Origin`, the method and `Access-Control-Request-Method`
//! (and `-Headers`, echoed for an `echo_wildcards` `*`).
//! Writes: `ctx.shaping.allowed` (the `Access-Control-Allow-Origin` the answer names, if any).
//! Answers: 204 to a preflight, never proxied: with the route's CORS fields when its origin
//! is allowed, without any when it is not (the browser then refuses the call).

use crate::answer::Step;
use crate::ctx::Ctx;
use crate::gateway::Gateway;
use crate::runtime::Runtime;
use bytes::Bytes;
use pingora::prelude::*;
use tollgate_core::filters::cors::CorsRt;

pub async fn run(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    rt: &Runtime,
    route: usize,
) -> Result<Step> {
    let r = &rt.routes[route];
    let Some(cors) = r.shaping.as_ref().and_then(|s| s.cors.as_ref()) else {
        return Ok(Step::Next);
    };
    let req = session.req_header();
    let allowed = cors.allowed(&req.headers);
    if CorsRt::is_preflight(&req.method, &req.headers) {
        let result = if allowed.is_some() {
            "allowed"
        } else {
            "refused"
        };
        gw.shared
            .metrics
            .cors_preflights
            .with_label_values(&[&r.name, result])
            .inc();
        let mut head = Gateway::head(session, ctx, 204, "text/plain", 0)?;
        cors.put_preflight(&mut head, &allowed, &req.headers);
        gw.answer(session, ctx, head, Bytes::new()).await?;
        return Ok(Step::Answered);
    }
    ctx.shaping.get_or_insert_with(Default::default).allowed = allowed;
    Ok(Step::Next)
}
