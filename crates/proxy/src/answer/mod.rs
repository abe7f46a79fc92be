//! Every answer the gateway makes at the edge is written here, in one place: its head (wire
//! lines over HTTP/1, a header map over HTTP/2), the fields every edge answer carries (the
//! RateLimit fields, HSTS, the route's response header rules and CORS fields) and its body,
//! after a small request body is drained so the connection can carry the next request.
//! [`refuse`] holds the refusals (429, 403 for a blocked key, 503 when a limit cannot be
//! checked) and the tarpit. The stages ([`crate::stages`]) and the phases ([`crate::gateway`])
//! call it; it reads the request state ([`Ctx`]) and the runtime, never a stage.

use crate::ctx::Ctx;
use crate::gateway::Gateway;
use crate::inbound::{declared_length, vars};
use bytes::Bytes;
use http::HeaderValue;
use pingora::http::{ResponseHeader, StaticHeaderName};
use pingora::prelude::*;
use pingora::protocols::http::ServerSession;
use tollgate_core::respond::{names, Extra, Fields, Head, Problem, Value};

pub mod refuse;

/// What a stage decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Go on to the next stage.
    Next,
    /// An answer was written: the request ends here.
    Answered,
}

impl Gateway {
    /// Writes a problem+json answer with no extra members or fields: the stage then ends the
    /// request.
    pub(crate) async fn answer_problem(
        &self,
        session: &mut Session,
        ctx: &Ctx,
        p: Problem,
        detail: &str,
    ) -> Result<Step> {
        self.problem(session, ctx, p, detail, &[], &[]).await?;
        Ok(Step::Answered)
    }

    /// The head of an edge answer for this session: wire lines over HTTP/1, a header map
    /// over HTTP/2 (see [`Head`]).
    pub(crate) fn head(
        session: &Session,
        ctx: &Ctx,
        status: u16,
        content_type: &'static str,
        len: usize,
    ) -> Result<Head> {
        // 1xx, 204 and 304 have no body: they take the header map.
        let wire = session.as_http1().is_some() && status >= 200 && status != 204 && status != 304;
        Head::new(wire, status, content_type, len, &ctx.request_id)
    }

    /// Writes an answer made at the edge. The caller returns `Ok(true)` after it.
    pub(crate) async fn answer(
        &self,
        session: &mut Session,
        ctx: &Ctx,
        mut head: Head,
        body: Bytes,
    ) -> Result<()> {
        ctx.add_limit_headers(&mut head);
        if let Some(v) = &ctx.hsts {
            head.put(&names::STRICT_TRANSPORT_SECURITY, Value::Header(v));
        }
        if let (Some(rt), Some(route)) = (&ctx.rt, ctx.route) {
            if let Some(s) = &rt.routes[route].shaping {
                route_fields(s, ctx, session, &mut head);
            }
        }
        // Never read a body over the route's cap (a 413): the connection closes instead.
        let limit = match ctx.max_body {
            0 => DRAIN_LIMIT,
            cap => cap.min(DRAIN_LIMIT),
        };
        drain_body_up_to(session, limit).await;
        // The wire path writes to the HTTP/1 session itself, past Pingora's downstream modules:
        // Tollgate registers none (init_downstream_modules).
        match (head, session.downstream_session.as_mut()) {
            (Head::Wire { status, lines }, ServerSession::H1(h1)) => {
                // What response_written() reports (the status); the fields went on the wire.
                let written = ResponseHeader::build_no_case(status, Some(0))?;
                h1.write_response_with_fields(Box::new(written), &lines, &body)
                    .await
            }
            (Head::Wire { .. }, _) => Error::e_explain(
                InternalError,
                "an HTTP/1 answer's head for a session that is not HTTP/1",
            ),
            (Head::Map(resp), _) => {
                let head_only = session.req_header().method == http::Method::HEAD;
                session
                    .write_response_header(resp, head_only || body.is_empty())
                    .await?;
                if !head_only && !body.is_empty() {
                    session.write_response_body(Some(body), true).await?;
                }
                Ok(())
            }
        }
    }

    /// 308 to the same target over HTTPS (a method and body are kept by a 308, unlike 301).
    pub(crate) async fn redirect_to_https(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        location: Option<HeaderValue>,
    ) -> Result<bool> {
        let Some(location) = location else {
            self.problem(
                session,
                ctx,
                Problem::BadRequest,
                "This address is served over HTTPS only, and the request names no host to redirect to.",
                &[],
                &[],
            )
            .await?;
            return Ok(true);
        };
        let mut head = Self::head(session, ctx, 308, "text/plain", 0)?;
        head.put(&names::LOCATION, Value::Header(&location));
        self.answer(session, ctx, head, Bytes::new()).await?;
        Ok(true)
    }

    pub(crate) async fn problem(
        &self,
        session: &mut Session,
        ctx: &Ctx,
        p: Problem,
        detail: &str,
        extra: &[(&str, Extra<'_>)],
        headers: &[(&StaticHeaderName, HeaderValue)],
    ) -> Result<()> {
        let body = p.body(detail, ctx.request_id(), extra);
        let mut head = Self::head(
            session,
            ctx,
            p.status(),
            "application/problem+json",
            body.len(),
        )?;
        for (k, v) in headers {
            head.put(k, Value::Header(v));
        }
        self.answer(session, ctx, head, body).await
    }
}

/// Bodies up to this size are read and discarded before an edge answer, so that the client's
/// connection can carry its next request (a refused login POST keeps its keep-alive). Larger
/// or chunked bodies are not read: the connection closes after the answer instead.
pub(crate) const DRAIN_LIMIT: u64 = 64 * 1024;
pub(crate) const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

pub(crate) async fn drain_small_body(session: &mut Session) {
    drain_body_up_to(session, DRAIN_LIMIT).await
}

/// [`drain_small_body`] for bodies of at most `limit` bytes.
async fn drain_body_up_to(session: &mut Session, limit: u64) {
    if session.is_body_done() {
        return;
    }
    let small = declared_length(session.req_header())
        .flatten()
        .is_some_and(|n| n <= limit);
    if small {
        // A client that stalls mid-body loses its connection, nothing else.
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, session.drain_request_body()).await;
    }
}

/// An answer made at the edge (a refusal, a redirect, a `respond`) on a route with shaping:
/// the route's response header rules, and its CORS fields once the CORS stage judged the
/// origin (a 429 a page can read).
fn route_fields(
    s: &tollgate_core::filters::shaping::ShapingRt,
    ctx: &crate::ctx::Ctx,
    session: &pingora::proxy::Session,
    head: &mut tollgate_core::respond::Head,
) {
    if let (Some(c), Some(sc)) = (&s.cors, &ctx.shaping) {
        c.put_answer(head, &sc.allowed);
    }
    if let Some(r) = &s.response_rules {
        r.apply_head(head, &vars(ctx, session));
    }
}
