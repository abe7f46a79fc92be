//! `upstream_peer`: the next healthy target of the chosen upstream's pool, round robin or by
//! its policy and affinity cookie (none healthy: 502; a name that never resolved: 503, from
//! `fail_to_proxy`).

use super::Gateway;
use crate::ctx::Ctx;
use pingora::prelude::*;
use pingora::ErrorSource;

pub(super) async fn upstream_peer(
    _gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
) -> Result<Box<HttpPeer>> {
    if ctx.balance.as_ref().is_some_and(|b| b.backoff) {
        backoff(ctx).await?;
    }
    // Chosen by request_filter for every request that gets here.
    let (Some(rt), Some(u)) = (&ctx.rt, ctx.upstream) else {
        return Err(Error::explain(
            ErrorType::InternalError,
            "no upstream in context",
        ));
    };
    ctx.tries += 1;
    let pool = &rt.upstreams[u].pool;
    let peer = if pool.chooses() {
        // A policy, affinity or retries: the pick is kept for its whole attempt.
        let rt = rt.clone();
        let client = ctx.client.unwrap_or(ctx.peer);
        let b = ctx.balance.get_or_insert_with(Default::default);
        tollgate_upstream::attempt::attempt(
            &rt.upstreams[u].pool,
            session.req_header(),
            client,
            ctx.canonical_path.as_deref(),
            b,
            ctx.tries == 1,
        )
    } else {
        pool.select_peer()
    };
    if let Some(p) = &peer {
        if pool.config().outlier.is_some() {
            ctx.target = p._address.as_inet().copied();
        }
    }
    let Some(mut peer) = peer else {
        let mut e = Error::explain(
            ErrorType::ConnectNoRoute,
            "no healthy target in the upstream pool",
        );
        e.esource = ErrorSource::Upstream;
        return Err(e);
    };
    if let Some(t) = ctx.route.and_then(|r| rt.routes[r].cfg.timeouts.as_deref()) {
        timeouts(&mut peer, t, ctx.start)?;
    }
    Ok(peer)
}

/// The chosen upstream's `retry.backoff`.
pub(super) fn retry_backoff(ctx: &Ctx) -> Option<std::time::Duration> {
    let (Some(rt), Some(u)) = (&ctx.rt, ctx.upstream) else {
        return None;
    };
    rt.upstreams[u].pool.config().retry?.backoff
}

/// A retry's `backoff`, cut to what is left of the route's request timeout (none left: 504;
/// a retry whose wait would not fit is not made, `retry::backoff_fits`).
async fn backoff(ctx: &mut Ctx) -> Result<()> {
    if let Some(b) = ctx.balance.as_mut() {
        b.backoff = false;
    }
    let Some(wait) = retry_backoff(ctx) else {
        return Ok(());
    };
    if let Some(d) = super::errors::route_deadline(ctx) {
        let left = d.saturating_sub(ctx.start.elapsed());
        if left <= wait {
            tokio::time::sleep(left).await;
            return Err(super::errors::past_deadline_error());
        }
    }
    tokio::time::sleep(wait).await;
    Ok(())
}

/// A route's `timeouts` on this attempt: `upstream` in place of the upstream's read
/// timeout, and every wait cut to what is left of `request` (none left: 504 at once).
fn timeouts(
    peer: &mut HttpPeer,
    t: &tollgate_config::model::RouteTimeouts,
    start: std::time::Instant,
) -> Result<()> {
    let o = &mut peer.options;
    if let Some(u) = t.upstream {
        o.read_timeout = Some(u);
    }
    if let Some(r) = t.request {
        let left = r.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(super::errors::past_deadline_error());
        }
        let cut = |d: Option<std::time::Duration>| Some(d.map_or(left, |d| d.min(left)));
        o.read_timeout = cut(o.read_timeout);
        o.write_timeout = cut(o.write_timeout);
        o.connection_timeout = cut(o.connection_timeout);
        o.total_connection_timeout = cut(o.total_connection_timeout);
    }
    Ok(())
}
