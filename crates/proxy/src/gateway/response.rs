//! `response_filter` and `response_body_filter`: the route's header rules, CORS fields and
//! compression, then X-Request-Id, HSTS, the RateLimit fields and the affinity cookie toward
//! the client; compression and `limit_rate` on the body.

use super::Gateway;
use crate::ctx::Ctx;
use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use tollgate_core::respond::names;

pub(super) fn response_filter(
    gw: &Gateway,
    session: &mut Session,
    resp: &mut ResponseHeader,
    ctx: &mut Ctx,
) -> Result<()> {
    // The route's header rules, CORS fields and compression first: the fields the
    // gateway writes below always win.
    if let (Some(rt), Some(r)) = (&ctx.rt, ctx.route) {
        if let Some(s) = rt.routes[r].shaping.as_deref() {
            let kept = ctx.shaping.take();
            let vars = crate::inbound::vars(ctx, session);
            let count = |sc: &tollgate_core::filters::shaping::ShapingCtx| {
                if let Some(enc) = sc.encoding() {
                    gw.shared
                        .metrics
                        .compressed
                        .with_label_values(&[&rt.routes[r].name, enc])
                        .inc();
                }
            };
            match kept {
                Some(mut sc) => {
                    sc.response(s, session.req_header(), resp, &vars);
                    count(&sc);
                    ctx.shaping = Some(sc);
                }
                // Nothing for the body to do (no compression, no bandwidth, no CORS
                // origin): the response state lives on the stack, nothing allocated.
                None if !s.shapes_body() => {
                    tollgate_core::filters::shaping::ShapingCtx::default().response(
                        s,
                        session.req_header(),
                        resp,
                        &vars,
                    );
                }
                None => {
                    let mut sc = Box::<tollgate_core::filters::shaping::ShapingCtx>::default();
                    sc.response(s, session.req_header(), resp, &vars);
                    count(&sc);
                    ctx.shaping = Some(sc);
                }
            }
        }
    }
    resp.insert_static_header(&names::X_REQUEST_ID, ctx.request_id.clone());
    if let Some(v) = &ctx.hsts {
        resp.insert_static_header(&names::STRICT_TRANSPORT_SECURITY, v.clone());
    }
    if resp.status == http::StatusCode::SWITCHING_PROTOCOLS {
        // An upgraded connection is not bound by the body deadlines.
        session.set_read_timeout(None);
    }
    ctx.add_limit_headers(resp);
    if let Some(b) = ctx.balance.as_deref() {
        pin(ctx, b, resp)?;
    }
    if let Some(a) = &ctx.auth {
        for c in &a.passed.cookies {
            resp.append_header(http::header::SET_COOKIE, c.clone())?;
        }
    }
    Ok(())
}

/// Compression and `limit_rate` on a route with them; never on an upgraded connection (a
/// WebSocket's frames are not a download: pacing them would only add latency).
pub(super) fn response_body_filter(
    _gw: &Gateway,
    session: &mut Session,
    body: &mut Option<Bytes>,
    end_of_stream: bool,
    ctx: &mut Ctx,
) -> Result<Option<std::time::Duration>> {
    let (Some(sc), Some(rt), Some(r)) = (ctx.shaping.as_deref_mut(), &ctx.rt, ctx.route) else {
        return Ok(None);
    };
    if session.was_upgraded() {
        return Ok(None);
    }
    match rt.routes[r].shaping.as_deref() {
        Some(s) => Ok(sc.body(s, body, end_of_stream)),
        None => Ok(None),
    }
}

/// Affinity: the client is (re)pinned to the target that answered unless its cookie named it.
fn pin(
    ctx: &Ctx,
    b: &tollgate_upstream::attempt::BalanceCtx,
    resp: &mut ResponseHeader,
) -> Result<()> {
    let (Some(rt), Some(u), Some(p)) = (&ctx.rt, ctx.upstream, &b.pick) else {
        return Ok(());
    };
    if let Some(a) = &rt.upstreams[u].pool.affinity {
        if b.pinned != Some(p.target.id) {
            resp.append_header(
                http::header::SET_COOKIE,
                a.set_cookie(p.target.id, ctx.secure),
            )?;
        }
    }
    Ok(())
}
