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
        RouteAction::Respond { status, .. } if rt.routes[route].cfg.redirect.is_some() => {
            let Some(rd) = rt.routes[route].cfg.redirect.as_deref() else {
                return Ok(Step::Next);
            };
            let location = redirect_location(session, ctx, rt, rd);
            let mut head = Gateway::head(session, ctx, *status, "text/plain; charset=utf-8", 0)?;
            if let Some(l) = &location {
                head.put(&names::LOCATION, Value::Header(l));
            }
            gw.answer(session, ctx, head, Bytes::new()).await?;
            Ok(Step::Answered)
        }
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

/// A `redirect`'s Location, from the request as routing read it (its canonical host and
/// path; the query as sent): each part kept or replaced, as the Gateway API's
/// RequestRedirect says. `None` when the request names no host and the redirect gives none.
fn redirect_location(
    session: &Session,
    ctx: &Ctx,
    rt: &Runtime,
    rd: &tollgate_config::model::Redirect,
) -> Option<HeaderValue> {
    use tollgate_config::model::RedirectPath;
    let req = session.req_header();
    let t = crate::inbound::canonical_target(req, rt.path_rules).ok()?;
    let scheme = rd
        .scheme
        .as_deref()
        .unwrap_or(if ctx.secure { "https" } else { "http" });
    let host = rd.host.as_deref().or(t.host.as_deref())?;
    let port = match (rd.port, &rd.scheme) {
        (Some(p), _) => Some(p),
        (None, Some(_)) => None,
        (None, None) => crate::runtime::local_port(session),
    };
    let default_port = if scheme == "https" { 443 } else { 80 };
    let path: std::borrow::Cow<str> = match &rd.path {
        None => t.path.clone(),
        Some(RedirectPath::Full(p)) => p.as_str().into(),
        Some(RedirectPath::Prefix { matched, with }) => {
            let rest = t.path.get(matched.len()..).unwrap_or("");
            let with = if rest.starts_with('/') {
                with.trim_end_matches('/')
            } else {
                with.as_str()
            };
            let joined = format!("{with}{rest}");
            if joined.is_empty() {
                "/".into()
            } else {
                joined.into()
            }
        }
    };
    let mut s = format!("{scheme}://");
    if host.contains(':') {
        s.push('[');
        s.push_str(host);
        s.push(']');
    } else {
        s.push_str(host);
    }
    if let Some(p) = port.filter(|&p| p != default_port) {
        s.push(':');
        s.push_str(&p.to_string());
    }
    s.push_str(&path);
    if let Some(q) = req.uri.query() {
        s.push('?');
        s.push_str(q);
    }
    HeaderValue::from_str(&s).ok()
}
