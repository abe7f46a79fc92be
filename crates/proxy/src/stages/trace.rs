//! Stage 1b, the trace: which trace this request belongs to (`[tracing]`).
//!
//! Reads: `traceparent` and `tracestate`, only when their sender may set them
//! (`trust_context`: the trusted proxies by default); the peer address.
//! Writes: `ctx.trace` (the trace id, the gateway's spans' ids, whether it is sampled); the
//! upstream is sent the context later ([`tollgate_core::filters::shaping`]'s upstream request), and the spans
//! are built when the request ends (`logging`), only if sampled or refused with
//! `sample_refusals`.
//! Answers: never.
//! Entered only when `[tracing]` is configured.

use crate::ctx::Ctx;
use pingora::prelude::*;
use tollgate_core::client_ip::trusted;
use tollgate_core::observe::traces::{begin, TraceRt};

pub fn run(session: &Session, ctx: &mut Ctx, t: &TraceRt, proxies: &[ipnet::IpNet]) {
    let trusted = t.cfg.trust == tollgate_config::model::TrustContext::TrustedProxies
        && trusted(ctx.peer, proxies);
    ctx.trace = Some(begin(t, session.req_header(), trusted, ctx.start));
}
