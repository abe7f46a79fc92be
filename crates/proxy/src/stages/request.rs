//! Stage 1, the request: who asked and how.
//!
//! Reads: the connection (peer address, TLS), the request head's `X-Request-Id` and size.
//! Writes: the head: with `[server] underscores_in_headers = false` (the default, as nginx),
//! every header whose name holds `_` is removed first, before any stage or the upstream reads
//! it (counted in `tollgate_request_headers_dropped_total{reason="underscore"}`);
//! `ctx.peer`, `ctx.request_id` (the client's when valid, else a new one),
//! `ctx.secure` and `ctx.hsts`; the connection's read and write deadlines for this request
//! (`body_timeout`, `send_timeout`).
//! Answers: 431 when an HTTP/2 head has more fields than `max_headers` (an HTTP/1 head over
//! the bounds never gets here: Pingora's reader refuses it).

use crate::answer::Step;
use crate::ctx::{new_request_id, valid_request_id, Ctx};
use crate::gateway::Gateway;
use crate::inbound::is_secure;
use crate::runtime::Runtime;
use pingora::prelude::*;
use std::net::{IpAddr, Ipv4Addr};
use tollgate_core::respond::{names, Problem};

pub async fn run(gw: &Gateway, session: &mut Session, ctx: &mut Ctx, rt: &Runtime) -> Result<Step> {
    if !rt.config.server.underscores_in_headers {
        let dropped = tollgate_core::filters::headers::drop_underscored(session.req_header_mut());
        if dropped > 0 {
            gw.shared
                .metrics
                .request_headers_dropped
                .with_label_values(&["underscore"])
                .inc_by(dropped as u64);
        }
    }
    ctx.peer = session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let req = session.req_header();
    ctx.request_id = match req.headers.get(names::X_REQUEST_ID.name()) {
        Some(v) if valid_request_id(v.as_bytes()) => v.clone(),
        _ => new_request_id(),
    };
    ctx.secure = is_secure(session, ctx.peer, rt);
    if ctx.secure {
        ctx.hsts = rt.hsts.clone();
    }
    let hardening = &rt.config.server.hardening;
    // Each read of the body waits at most this; min_body_rate tightens it as the body
    // arrives (request_body_filter).
    session.set_read_timeout(Some(hardening.body_timeout));
    // Each write of the answer (a chunk, or an h2 wait for flow-control credit) waits at
    // most this: a client that stops reading cannot hold its connection and upstream.
    session.set_write_timeout(Some(hardening.send_timeout));
    if session.req_header().headers.len() > hardening.max_headers {
        return gw
            .answer_problem(
                session,
                ctx,
                Problem::HeaderFieldsTooLarge,
                "The request head is over max_header_bytes or max_headers.",
            )
            .await;
    }
    Ok(Step::Next)
}
