//! A route's `error_pages` (docs/edge.md): an answer with a listed status, the upstream's or
//! the gateway's own failure to proxy (502, 503, 504), is replaced by the page another
//! upstream answers, as nginx's `error_page` with `proxy_intercept_errors` (ingress-nginx's
//! `custom-http-errors`).
//!
//! The page is asked as ingress-nginx asks its default backend: the client's method, the
//! path `/` with the client's query, and the fields `X-Code`, `X-Format` (the client's
//! Accept), `X-Original-URI`, `X-Request-ID`, `X-Forwarded-For` and the client's `Host`, plus
//! the route's own `headers`; never the client's other fields (its cookies and credentials
//! are the application's, not the page's). Its status and fields are the client's answer.
//! A page that cannot be had (no target, no answer in time, over 1 MiB) leaves the original
//! answer as it was: nothing is lost.

use super::Gateway;
use crate::ctx::{Ctx, Page};
use bytes::Bytes;
use http::HeaderValue;
use http_body_util::Full;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use tollgate_config::model::ErrorPages;
use tollgate_core::respond::names;

/// The largest page read.
const PAGE_MAX: usize = 1 << 20;

/// Fields of the page's answer that are its connection's, not the client's.
const HOP: &[http::HeaderName] = &[
    http::header::CONNECTION,
    http::header::TRANSFER_ENCODING,
    http::header::CONTENT_LENGTH,
    http::header::TE,
    http::header::TRAILER,
    http::header::UPGRADE,
];

/// The route's error pages, when they take `status` (one check on routes without them).
pub(super) fn wanted(ctx: &Ctx, status: u16) -> bool {
    pages(ctx).is_some_and(|ep| ep.codes.binary_search(&status).is_ok())
}

/// [`wanted`], for an upstream's answer.
pub(super) fn wanted_for_upstream(ctx: &Ctx, status: u16) -> bool {
    pages(ctx).is_some_and(|ep| ep.upstream_answers && ep.codes.binary_search(&status).is_ok())
}

fn pages(ctx: &Ctx) -> Option<&ErrorPages> {
    let (rt, r) = (ctx.rt.as_ref()?, ctx.route?);
    rt.routes[r].cfg.fallback.as_ref()?.error_pages.as_ref()
}

/// The page for `status`, counted; `None` when it cannot be had.
pub(super) async fn page(
    gw: &Gateway,
    session: &Session,
    ctx: &Ctx,
    status: u16,
) -> Option<(ResponseHeader, Bytes)> {
    let (rt, r) = (ctx.rt.as_ref()?, ctx.route?);
    let ep = pages(ctx)?;
    let got = fetch(gw, session, ctx, ep, status).await;
    let result = if got.is_some() { "served" } else { "failed" };
    gw.shared
        .metrics
        .error_pages
        .with_label_values(&[&rt.routes[r].name, result])
        .inc();
    got
}

async fn fetch(
    gw: &Gateway,
    session: &Session,
    ctx: &Ctx,
    ep: &ErrorPages,
    status: u16,
) -> Option<(ResponseHeader, Bytes)> {
    let rt = ctx.rt.as_ref()?;
    let pool = &rt.upstreams[ep.upstream].pool;
    let peer = pool.select_peer()?;
    let addr = *peer._address.as_inet()?;
    let client = gw.shared.side_client.get()?;
    let req = session.req_header();
    // The client's target less an API key its auth reads from the query.
    let shown = super::shown_target(ctx, req);
    let uri = match shown.split_once('?') {
        Some((_, q)) => format!("http://{addr}/?{q}"),
        None => format!("http://{addr}/"),
    };
    let mut out = http::Request::builder()
        .method(req.method.clone())
        .uri(uri)
        .body(Full::new(Bytes::new()))
        .ok()?;
    let h = out.headers_mut();
    let host = req
        .headers
        .get(http::header::HOST)
        .cloned()
        .or_else(|| HeaderValue::from_str(req.uri.authority()?.as_str()).ok());
    if let Some(host) = host {
        h.insert(http::header::HOST, host);
    }
    h.insert("x-code", HeaderValue::from(status));
    if let Some(a) = req.headers.get(http::header::ACCEPT) {
        h.insert("x-format", a.clone());
    }
    if let Ok(v) = HeaderValue::from_str(&shown) {
        h.insert("x-original-uri", v);
    }
    h.insert("x-request-id", ctx.request_id.clone());
    if let Ok(v) = HeaderValue::from_str(&ctx.client.unwrap_or(ctx.peer).to_string()) {
        h.insert("x-forwarded-for", v);
    }
    for (k, v) in &ep.headers {
        if let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            h.insert(k, v);
        }
    }
    let cfg = pool.config();
    let deadline = cfg.connect_timeout + cfg.read_timeout;
    let head_only = req.method == http::Method::HEAD;
    let (parts, body) =
        match tollgate_core::net::client::exchange(client, out, deadline, PAGE_MAX).await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "error pages: no page");
                return None;
            }
        };
    let mut head = ResponseHeader::build(parts.status, Some(parts.headers.len() + 2)).ok()?;
    for (k, v) in &parts.headers {
        if !HOP.contains(k) {
            head.append_header(k.clone(), v.clone()).ok()?;
        }
    }
    let len = if head_only {
        parts.headers.get(http::header::CONTENT_LENGTH).cloned()
    } else {
        Some(HeaderValue::from(body.len()))
    };
    if let Some(l) = len {
        head.insert_header(http::header::CONTENT_LENGTH, l).ok()?;
    }
    Some((head, body))
}

/// What `response_filter` ends with when the page goes through `fail_to_proxy` instead.
const PAGE_INSTEAD: &str = "error page instead of a bodiless answer";

pub(super) fn is_page_instead(e: &Error) -> bool {
    matches!(e.etype(), ErrorType::Custom(PAGE_INSTEAD))
}

/// `response_filter`: the upstream's answer `resp` (of a listed status) becomes the page. Its
/// body then replaces the upstream's in `response_body_filter`; an answer whose framing
/// says no body follows (`Content-Length: 0`, or an HTTP/2 upstream's without a length)
/// never reaches that filter, so the page is written by `fail_to_proxy` instead (the
/// connection then closes after it).
pub(super) async fn replace(
    gw: &Gateway,
    session: &mut Session,
    resp: &mut ResponseHeader,
    ctx: &mut Ctx,
) -> Result<()> {
    let Some((head, body)) = page(gw, session, ctx, resp.status.as_u16()).await else {
        return Ok(());
    };
    let no_length = resp.headers.get(http::header::CONTENT_LENGTH).is_none()
        && resp.headers.get(http::header::TRANSFER_ENCODING).is_none();
    let h2 =
        matches!((&ctx.rt, ctx.upstream), (Some(rt), Some(u)) if rt.upstreams[u].pool.config().h2);
    let bodiless = session.req_header().method != http::Method::HEAD
        && (resp
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
            == Some(0)
            || (h2 && no_length));
    if bodiless {
        ctx.page = Some(Box::new(Page {
            head: Some(head),
            body: Some(body),
        }));
        return Err(Error::explain(
            ErrorType::Custom(PAGE_INSTEAD),
            "written by fail_to_proxy",
        ));
    }
    *resp = head;
    ctx.page = Some(Box::new(Page {
        head: None,
        body: Some(body),
    }));
    Ok(())
}

/// `fail_to_proxy`: the page in place of the gateway's own failure answer, when the route
/// lists its status, or of a bodiless upstream answer ([`replace`]); `true` when it was
/// written.
pub(super) async fn instead_of_failure(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    status: u16,
) -> bool {
    let kept = ctx
        .page
        .as_deref_mut()
        .and_then(|p| Some((p.head.take()?, p.body.take()?)));
    let got = match kept {
        Some(p) => Some(p),
        None if wanted(ctx, status) => page(gw, session, ctx, status).await,
        None => None,
    };
    let Some((mut head, body)) = got else {
        return false;
    };
    head.insert_static_header(&names::X_REQUEST_ID, ctx.request_id.clone());
    ctx.add_limit_headers(&mut head);
    if let Some(v) = &ctx.hsts {
        head.insert_static_header(&names::STRICT_TRANSPORT_SECURITY, v.clone());
    }
    let written = async {
        session.write_response_header(Box::new(head), false).await?;
        session.write_response_body(Some(body), true).await
    };
    if let Err(e) = written.await {
        tracing::debug!(error = %e, "could not send the error page");
    }
    true
}
