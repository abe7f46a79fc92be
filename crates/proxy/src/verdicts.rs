//! What a limit verdict leaves behind: decisions counted per limit, ladders climbed (a key
//! blocked here and through Redis), the RateLimit and quota-warning state of the answer, the
//! shadow-mode log, and units given back by `count = "failures"` limits.

use crate::ctx::Ctx;
use crate::gateway::Gateway;
use crate::limits::policy::{Plan, Verdict};
use crate::runtime::Runtime;
use http::HeaderValue;

impl Gateway {
    /// `tollgate_limit_decisions_total` per limit, and refusals per key for the hottest key.
    pub(crate) fn count_decisions(&self, rt: &Runtime, route: usize, plan: &Plan, v: &Verdict) {
        use crate::limits::compiled::{ALLOWED, BLOCKED, REFUSED, SHADOW_REFUSED};
        let refused_any = v.denied.is_some() || v.blocked.is_some();
        let now = plan.now();
        let m = &self.shared.metrics;
        for (pos, &li) in rt.routes[route].cfg.limits.iter().enumerate() {
            let l = &rt.limits[li];
            let bit = 1u32 << pos;
            if v.refused & bit != 0 {
                let blocked = v.blocked.is_some_and(|(b, _)| b == li);
                l.decided(m, if blocked { BLOCKED } else { REFUSED }).inc();
                l.hot.refused(plan.key(pos), now);
            } else if v.shadow_exceeded & bit != 0 {
                l.decided(m, SHADOW_REFUSED).inc();
            } else if !refused_any && plan.took(pos).any() {
                l.decided(m, ALLOWED).inc();
            }
        }
    }

    /// Counts a refusal in the ladders of the limits that refused; a ladder that trips blocks
    /// the key here at once, and through Redis on every instance when Redis is configured.
    pub(crate) fn climb_ladders(&self, rt: &Runtime, route: usize, plan: &Plan, refused: u32) {
        let now = plan.now();
        for (pos, &li) in rt.routes[route].cfg.limits.iter().enumerate() {
            if refused & (1 << pos) == 0 {
                continue;
            }
            let l = &rt.limits[li];
            let Some(lad) = &l.ladder else {
                continue;
            };
            let key = plan.key(pos);
            let Some(t) = lad.ladder.refused(key, now) else {
                continue;
            };
            if let Some(c) = lad.imposed.get(t.rung as usize) {
                c.inc();
            }
            tracing::warn!(
                event = "key_blocked",
                limit = %l.cfg.name,
                route = %rt.routes[route].name,
                key = %format_args!("{key:016x}"),
                rung = t.rung,
                block_for_s = t.block_for.as_secs(),
                "a key refused too often is blocked"
            );
            if let Some(store) = &self.shared.store {
                let (store, name) = (store.clone(), l.cfg.name.clone());
                tokio::spawn(async move {
                    if let Err(e) = store.block(&name, key, t.block_for, t.rung).await {
                        tracing::warn!(limit = %name, error = %e, "could not share a block through Redis");
                    }
                });
            }
        }
    }

    pub(crate) fn note_verdict(
        &self,
        ctx: &mut Ctx,
        rt: &Runtime,
        route: usize,
        v: &Verdict,
        plan: &Plan,
    ) {
        if let Some((li, used)) = v.quota_warning {
            let l = &rt.limits[li];
            let quota = l.quota_rt.as_ref().map_or(0, |q| q.quota);
            ctx.quota_warning = HeaderValue::from_str(&format!(
                "quota \"{}\" exceeded: {used} of {quota} used this period",
                l.cfg.name
            ))
            .ok();
        }
        if let Some((li, remaining, reset)) = v.nearest {
            let cfg = &rt.limits[li].cfg;
            let remaining = remaining.min(cfg.burst);
            ctx.ratelimit = Some((
                li,
                remaining,
                tollgate_core::respond::reset_secs(cfg, remaining, reset),
            ));
        }
        if v.shadow_exceeded != 0 {
            ctx.shadow_exceeded = true;
            let limits = &rt.routes[route].cfg.limits;
            for (pos, &li) in limits.iter().enumerate() {
                if v.shadow_exceeded & (1 << pos) != 0 {
                    let l = &rt.limits[li];
                    l.shadowed(&self.shared.metrics).inc();
                    tracing::warn!(
                        event = "shadow_limit_exceeded",
                        limit = %l.cfg.name,
                        route = %rt.routes[route].name,
                        key = %format_args!("{:016x}", plan.key(pos)),
                        would_be_status = 429u16,
                        request_id = %ctx.request_id(),
                        "a shadow-mode limit would have refused this request"
                    );
                }
            }
        }
    }

    /// `count = "failures"`: a request whose response is not a failure gives its unit back
    /// (a successful login costs nothing; a 401 counts).
    pub(crate) fn refund_unless_failure(
        &self,
        rt: &Runtime,
        units: &[(usize, u64, crate::limits::policy::Took)],
        status: u16,
    ) {
        let now = self.shared.clock.now();
        for &(li, key, took) in units {
            let l = &rt.limits[li];
            if l.cfg
                .count_failures
                .as_ref()
                .is_some_and(|f| f.contains(&status))
            {
                continue;
            }
            let t = l.time(
                now,
                if l.quota {
                    self.shared.clock.unix_now()
                } else {
                    0
                },
            );
            crate::limits::policy::return_unit(l, key, t, took);
        }
    }
}
