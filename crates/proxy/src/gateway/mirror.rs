//! A route's `mirror` in the proxy phases: the copy's head is taken once the upstream request
//! is written (the first try only), its body as it streams past, and it is sent when the body
//! is in. A request that never reaches the upstream (refused, answered at the edge) is not
//! copied, as nginx's mirror runs after the access and limit phases.

use super::Gateway;
use crate::ctx::{Ctx, Mirroring};
use pingora::http::RequestHeader;
use pingora::prelude::*;
use tollgate_core::net::mirror::Request;

/// At the end of `upstream_request_filter`: starts the copy of `upstream`.
pub(super) fn start(gw: &Gateway, session: &mut Session, upstream: &RequestHeader, ctx: &mut Ctx) {
    match &mut ctx.mirroring {
        Mirroring::No => {}
        // A retry: Pingora replays the body from its start through request_body_filter.
        Mirroring::Reading(copy) => return gw.shared.mirrors.restart_body(copy),
        Mirroring::Done => return,
    }
    let (Some(rt), Some(r)) = (&ctx.rt, ctx.route) else {
        return;
    };
    let route = &rt.routes[r];
    let Some(m) = route.shaping.as_deref().and_then(|s| s.mirror.as_deref()) else {
        return;
    };
    ctx.mirroring = Mirroring::Done;
    // An upgrade is a tunnel, not a request a mirror can be sent.
    if session.is_upgrade_req() {
        return;
    }
    let req = session.req_header();
    let shown = super::shown_target(ctx, req);
    let request_uri = shown.as_ref();
    let host = tollgate_core::filters::headers::request_host(req);
    let values = Request {
        request_uri,
        uri: ctx.canonical_path.as_deref().unwrap_or(req.uri.path()),
        host: host.as_deref().unwrap_or(""),
        secure: ctx.secure,
    };
    // To an upstream: its next healthy target, as a request would be sent.
    let to = m
        .upstream
        .and_then(|u| rt.upstreams.get(u))
        .and_then(|u| u.pool.select_addr());
    let Some(copy) = gw.shared.mirrors.start(
        m,
        &route.name,
        &upstream.method,
        &upstream.headers,
        &values,
        to,
    ) else {
        return;
    };
    if m.body && !session.is_body_empty() {
        ctx.mirroring = Mirroring::Reading(Box::new(copy));
    } else {
        gw.shared.mirrors.send(copy);
    }
}

/// In `request_body_filter`: the chunk joins the copy; at the body's end the copy goes.
pub(super) fn body(gw: &Gateway, chunk: Option<&[u8]>, end_of_stream: bool, ctx: &mut Ctx) {
    let Mirroring::Reading(copy) = &mut ctx.mirroring else {
        return;
    };
    if let Some(b) = chunk {
        if !gw.shared.mirrors.push(copy, b, ctx.max_body) {
            ctx.mirroring = Mirroring::Done;
            return;
        }
    }
    if end_of_stream {
        if let Mirroring::Reading(copy) = std::mem::replace(&mut ctx.mirroring, Mirroring::Done) {
            gw.shared.mirrors.send(*copy);
        }
    }
}
