//! Stage 2, the route: what was asked, in its one canonical spelling, and where it goes.
//!
//! Reads: the request target and `Host` / `:authority` (through [`canonical_target`]), the
//! method, the routes; the route's rewrite and the header fields and query parameters its
//! keys, lists and token read.
//! Writes: `ctx.route`; `ctx.canonical_path` and `ctx.target_authority` when the client's
//! spelling was not canonical; `ctx.upstream_target` when the route rewrites (keys and input
//! checks read it from here on: what the upstream will read).
//! Answers: 400 (a target or host that cannot be made canonical, a rewrite whose output a
//! client's request would be refused for), 308 (plaintext to HTTPS, before anything else),
//! 308 (a `www_redirect` route's other spelling, to its named host, path and query kept),
//! 404 (no route), 400 `AMBIGUOUS_REQUEST` (an input given twice, or named hop-by-hop).
//! Returns the route taken, `None` when it answered.

use crate::ctx::Ctx;
use crate::gateway::Gateway;
use crate::inbound::{canonical_target, https_location};
use crate::runtime::Runtime;
use pingora::prelude::*;
use std::borrow::Cow;
use tollgate_core::respond::{Fields, Problem};
use tollgate_route::routing::RewriteRefusal;

pub async fn run(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    rt: &Runtime,
) -> Result<Option<usize>> {
    let req = session.req_header();
    let mut to_https = None;
    let mut to_named = false;
    let found = match canonical_target(req, rt.path_rules) {
        Ok(t) => {
            let entry = rt.route_entry(
                t.host.as_deref(),
                &t.path,
                req.method.as_str(),
                crate::runtime::Asked::of(
                    req,
                    rt.any_ports
                        .then(|| crate::runtime::routing_port(crate::runtime::local_port(session))),
                ),
            );
            to_named = entry.is_some_and(|e| e.www);
            let route = entry.map(|e| e.route);
            if let Some(r) =
                route.filter(|&r| !ctx.secure && rt.routes[r].redirects(&rt.config.server))
            {
                to_https = Some(https_location(
                    t.host.as_deref(),
                    &t.path,
                    req.uri.query(),
                    rt.https_port,
                    rt.routes[r].cfg.edge.https_redirect_drop_slash,
                ));
            }
            if t.rewrite {
                ctx.canonical_path = Some(t.path.into_owned());
                ctx.target_authority = t.authority.map(str::to_string);
            }
            Ok(route)
        }
        Err(e) => Err(e),
    };
    let found = match found {
        Ok(found) => found,
        Err((problem, detail)) => {
            gw.answer_problem(session, ctx, problem, detail).await?;
            return Ok(None);
        }
    };
    // Plaintext to HTTPS, before anything else.
    if let Some(location) = to_https {
        ctx.route = found;
        gw.redirect_to_https(session, ctx, location).await?;
        return Ok(None);
    }
    if let (true, Some(route)) = (to_named, found) {
        ctx.route = Some(route);
        www_redirect(gw, session, ctx, rt, route).await?;
        return Ok(None);
    }
    let Some(route) = found else {
        gw.answer_problem(
            session,
            ctx,
            Problem::NoRoute,
            "No route matches this request.",
        )
        .await?;
        return Ok(None);
    };
    ctx.route = Some(route);
    let r = &rt.routes[route];
    // The rewrite, before anything reads the request, so that keys, input checks and the
    // upstream read one target (see routing::RewriteRt).
    if let Some(rw) = &r.rewrite {
        let req = session.req_header();
        let path = ctx.canonical_path.as_deref().unwrap_or(req.uri.path());
        match rw.apply(path, req.uri.query(), rt.path_rules) {
            Ok(target) => ctx.upstream_target = target,
            Err(why) => {
                let (problem, detail) = rewrite_refusal(why);
                gw.answer_problem(session, ctx, problem, &detail).await?;
                return Ok(None);
            }
        }
    }
    if let Some(detail) = ambiguous(r, session, ctx) {
        gw.answer_problem(session, ctx, Problem::AmbiguousRequest, &detail)
            .await?;
        return Ok(None);
    }
    Ok(Some(route))
}

/// Every input the route's keys, lists and token read is given once: else what the client
/// is told.
fn ambiguous(r: &crate::runtime::route::RouteRt, session: &Session, ctx: &Ctx) -> Option<String> {
    let req = session.req_header();
    let query = match &ctx.upstream_target {
        Some(t) => t.query(),
        None => req.uri.query(),
    };
    let name = r.inputs.ambiguous(&req.headers, query)?;
    Some(format!(
        "\"{name}\": this route reads it to identify the caller, and it is given more than once or named as hop-by-hop; give it once."
    ))
}

/// Why a route's rewrite was refused, as the client is told.
pub(crate) fn rewrite_refusal(why: RewriteRefusal) -> (Problem, Cow<'static, str>) {
    match why {
        RewriteRefusal::Path(r) => (Problem::BadRequest, Cow::Borrowed(r.detail())),
        RewriteRefusal::DotSegment => (
            Problem::BadRequest,
            Cow::Borrowed(
                "This route's rewrite would send the upstream a path with a dot segment.",
            ),
        ),
        RewriteRefusal::Duplicate(name) => (
            Problem::AmbiguousRequest,
            Cow::Owned(format!(
                "\"?{name}\": this route's rewrite sets this query parameter; do not give it too."
            )),
        ),
    }
}

/// 308 from a route's other spelling (with or without `www.`) to its one host: the scheme,
/// the port the client named, the path and the query as sent.
async fn www_redirect(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    rt: &Runtime,
    route: usize,
) -> Result<()> {
    let req = session.req_header();
    let named = rt.routes[route].cfg.host.as_deref().unwrap_or_default();
    let port = req
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or(req.uri.authority().map(|a| a.as_str()))
        .and_then(|h| h.rsplit_once(':'))
        .and_then(|(_, p)| p.parse::<u16>().ok());
    let scheme = if ctx.secure { "https" } else { "http" };
    let target = req.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let location = match port {
        Some(p) => format!("{scheme}://{named}:{p}{target}"),
        None => format!("{scheme}://{named}{target}"),
    };
    let Ok(location) = http::HeaderValue::from_str(&location) else {
        gw.answer_problem(
            session,
            ctx,
            Problem::BadRequest,
            "The request target cannot be redirected.",
        )
        .await?;
        return Ok(());
    };
    let mut head = Gateway::head(session, ctx, 308, "text/plain", 0)?;
    head.put(
        &tollgate_core::respond::names::LOCATION,
        tollgate_core::respond::Value::Header(&location),
    );
    gw.answer(session, ctx, head, bytes::Bytes::new()).await
}
