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

use crate::answer::Step;
use crate::ctx::{AuthCtx, Ctx, Outcome};
use crate::gateway::Gateway;
use crate::runtime::Runtime;
use bytes::Bytes;
use pingora::prelude::*;
use std::borrow::Cow;
use std::sync::Arc;
use tollgate_auth::{Refusal, Request};
use tollgate_core::client_ip::client_ip;
use tollgate_core::respond::names;

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
    // What an auth service is told the request is: made only for one (a token, a password or
    // a key is checked without them).
    let asks = matches!(ra.auth.method, tollgate_auth::Method::Forward(_));
    let path = ctx.canonical_path.as_deref().unwrap_or(head.uri.path());
    let path_and_query = match asks {
        true => visible(path, head.uri.query()),
        false => Cow::Borrowed(""),
    };
    let host = if asks { authority(head) } else { None };
    let req = Request {
        head,
        client,
        secure: ctx.secure,
        path_and_query: &path_and_query,
        host: host.as_deref(),
        request_id: ctx.request_id(),
        route_name: &rt.routes[route].name,
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
                tollgate_auth::Outcome::Unauthenticated | tollgate_auth::Outcome::Forbidden
            );
            if counted && rt.routes[route].counts_failures && rt.routes[route].stages.limits {
                // The limits count this failure (and may refuse first): answered after them.
                ctx.auth = Some(Box::new(AuthCtx {
                    rt: ra.auth.clone(),
                    passed: tollgate_auth::Passed::default(),
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
            tollgate_core::respond::Fields::put(
                &mut head,
                &names::LOCATION,
                tollgate_core::respond::Value::Header(&location),
            );
            for c in &cookies {
                head.append(&names::SET_COOKIE, c);
            }
            gw.answer(session, ctx, head, Bytes::new()).await
        }
    }
}

/// The path and query as one header-safe text: bytes outside visible ASCII (a raw UTF-8 query)
/// percent-encoded, so the auth service is always told the target.
fn visible(path: &str, query: Option<&str>) -> Cow<'static, str> {
    let mut out = String::with_capacity(path.len() + query.map_or(0, |q| q.len() + 1));
    let mut push = |s: &str| {
        for b in s.bytes() {
            if (0x21..=0x7e).contains(&b) {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    };
    push(path);
    if let Some(q) = query {
        push("?");
        push(q);
    }
    Cow::Owned(out)
}

/// The request's host as routing made it canonical, with the port the client named.
fn authority(head: &pingora::http::RequestHeader) -> Option<String> {
    let raw = head
        .headers
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| head.uri.authority().map(|a| a.as_str()))?;
    let host = tollgate_route::normalize::normalize_host(raw).ok()?;
    let port = raw
        .rsplit_once(':')
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !raw.ends_with(']'));
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.into_owned()
    };
    Some(match port {
        Some(p) => format!("{host}:{p}"),
        None => host,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_hosts_as_the_auth_service_is_told() {
        assert_eq!(visible("/a", Some("x=\u{e9}")), "/a?x=%C3%A9");
        assert_eq!(visible("/a", None), "/a");
        let head = |h: &str| {
            let mut r = pingora::http::RequestHeader::build("GET", b"/", None).expect("req");
            r.insert_header("host", h).expect("host");
            r
        };
        assert_eq!(
            authority(&head("Admin.Example.com.")).as_deref(),
            Some("admin.example.com")
        );
        assert_eq!(
            authority(&head("admin.example.com:8443")).as_deref(),
            Some("admin.example.com:8443")
        );
        assert_eq!(
            authority(&head("[::1]:8080")).as_deref(),
            Some("[::1]:8080")
        );
        assert_eq!(authority(&head("a@b")), None);
    }
}
