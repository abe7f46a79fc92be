//! The refusals a limit makes: 429 (its pre-rendered body, Retry-After with jitter), 403
//! for a key a ladder blocked, 503 when a global limit cannot be checked and refuses while it
//! cannot; and the tarpit, which holds a request before it is refused or passed on.

use super::drain_small_body;
use crate::ctx::{Ctx, Outcome};
use crate::gateway::Gateway;
use crate::limits::policy::Plan;
use crate::runtime::series::RefusalKind;
use crate::runtime::Runtime;
use http::HeaderValue;
use pingora::prelude::*;
use pingora::ErrorSource;
use tollgate_config::model::Action;
use tollgate_core::respond::{names, Extra, Fields, Problem, Value};
use tollgate_limit::ceil_secs;

impl Gateway {
    /// A 429 for `limit`, its body the limit's pre-rendered refusal (rate limit, quota or
    /// challenge: [`tollgate_core::respond::refusal`]). `reason` is the metric's reason when not the
    /// limit's own (`rate_limit` or `quota`): `tarpit_overflow` or `challenge`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn refuse(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        rt: &Runtime,
        route: usize,
        limit: usize,
        wait: u64,
        reason: Option<&str>,
    ) -> Result<()> {
        let l = &rt.limits[limit];
        // Retry-After is whole seconds and at least 1: a client that waits that long passes.
        // Jitter only adds: a jittered client still passes when it returns.
        let jitter = l.cfg.retry_after_jitter.as_secs();
        let secs = ceil_secs(wait).max(1)
            + if jitter > 0 {
                fastrand::u64(0..=jitter)
            } else {
                0
            };
        ctx.ratelimit = Some((limit, 0, secs));
        if let Some(pos) = rt.routes[route].cfg.limits.iter().position(|&i| i == limit) {
            let r = &rt.routes[route];
            let why = match reason {
                Some("tarpit_overflow") => RefusalKind::TarpitOverflow,
                Some("challenge") => RefusalKind::Challenge,
                _ => RefusalKind::Limit,
            };
            if let Some(c) = r.series.refused(&self.shared.metrics, &r.name, pos, l, why) {
                c.inc();
            }
        }
        // The body was rendered when the config loaded: only the wait and the id go in.
        let body = l.refusal.fill(secs, ctx.request_id());
        let mut head = Self::head(session, ctx, 429, "application/problem+json", body.len())?;
        head.put(&names::RETRY_AFTER, Value::Int(secs));
        self.answer(session, ctx, head, body).await
    }

    /// A global limit could not be decided and its `on_error` is `closed`.
    pub(crate) async fn unavailable(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        rt: &Runtime,
        route: usize,
        limit: usize,
    ) -> Result<()> {
        let l = &rt.limits[limit];
        self.shared
            .metrics
            .rejected
            .with_label_values(&["limiter_unavailable", &rt.routes[route].name, &l.cfg.name])
            .inc();
        let detail = format!(
            "Limit \"{}\" cannot be checked right now and refuses while it cannot: retry shortly.",
            l.cfg.name
        );
        self.problem(
            session,
            ctx,
            Problem::LimiterUnavailable,
            &detail,
            &[("limit", Extra::Str(&l.cfg.name))],
            &[(&names::RETRY_AFTER, HeaderValue::from(1u64))],
        )
        .await
    }

    /// 403 `TEMPORARILY_BLOCKED` for a key a ladder blocked.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn blocked(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        rt: &Runtime,
        route: usize,
        limit: usize,
        plan: &Plan,
        wait: u64,
    ) -> Result<()> {
        let l = &rt.limits[limit];
        let pos = rt.routes[route].cfg.limits.iter().position(|&i| i == limit);
        let r = &rt.routes[route];
        let metrics = &self.shared.metrics;
        if let Some(c) = pos.and_then(|p| {
            r.series
                .refused(metrics, &r.name, p, l, RefusalKind::Blocked)
        }) {
            c.inc();
        }
        let secs = ceil_secs(wait).max(1);
        ctx.ratelimit = Some((limit, 0, secs));
        let id = format!("{:016x}", pos.map_or(0, |p| plan.key(p)));
        let detail = format!(
            "Blocked for {secs} s after exceeding limit \"{}\" repeatedly.",
            l.cfg.name
        );
        self.problem(
            session,
            ctx,
            Problem::TemporarilyBlocked,
            &detail,
            &[
                ("limit", Extra::Str(&l.cfg.name)),
                ("retry_after", Extra::Int(secs)),
                ("block_id", Extra::Str(&id)),
            ],
            &[(&names::RETRY_AFTER, HeaderValue::from(secs))],
        )
        .await
    }

    /// A request over `limit`: its action decides. True when answered (the caller ends the
    /// request); false when a tarpit passes it on after its hold.
    pub(crate) async fn over_limit(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        rt: &Runtime,
        route: usize,
        limit: usize,
        wait: u64,
    ) -> Result<bool> {
        let l = &rt.limits[limit];
        let tarpit = match l.action {
            Action::Challenge => {
                ctx.outcome = Outcome::Challenged;
                self.refuse(session, ctx, rt, route, limit, wait, Some("challenge"))
                    .await?;
                return Ok(true);
            }
            Action::Tarpit => l.tarpit.as_ref(),
            Action::Reject => rt.routes[route].tarpit.as_ref(),
        };
        let Some(tarpit) = tarpit else {
            self.refuse(session, ctx, rt, route, limit, wait, None)
                .await?;
            return Ok(true);
        };
        let r = &rt.routes[route];
        let Some(slot) = tarpit.enter(r.series.tarpit_held(&self.shared.metrics, &r.name)) else {
            ctx.outcome = Outcome::TarpitOverflow;
            // Full: holding more would let an attacker spend our memory instead of theirs.
            self.refuse(
                session,
                ctx,
                rt,
                route,
                limit,
                wait,
                Some("tarpit_overflow"),
            )
            .await?;
            return Ok(true);
        };
        r.series.tarpit_total(&self.shared.metrics, &r.name).inc();
        ctx.outcome = Outcome::Tarpitted;
        let held = tarpit.delay();
        let stayed = hold(session, held).await;
        drop(slot);
        if !stayed {
            let mut e = Error::explain(
                ErrorType::ConnectionClosed,
                "the client left while held in the tarpit",
            );
            e.esource = ErrorSource::Downstream;
            return Err(e);
        }
        if tarpit.cfg.then_pass {
            ctx.outcome = Outcome::TarpitPassed;
            return Ok(false);
        }
        // The connection closes after the answer: the next attempt pays for a new one. The
        // wait is what is left of it after the hold.
        session.set_keepalive(None);
        let left = wait.saturating_sub(u64::try_from(held.as_nanos()).unwrap_or(u64::MAX));
        self.refuse(session, ctx, rt, route, limit, left, None)
            .await?;
        Ok(true)
    }
}

/// Holds a request for `delay` on a timer (no thread, no polling), watching the connection: a
/// client that leaves ends the hold at once and frees its slot. False if the client left.
pub(crate) async fn hold(session: &mut Session, delay: std::time::Duration) -> bool {
    drain_small_body(session).await;
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    if session.is_body_done() {
        tokio::select! {
            _ = &mut sleep => return true,
            r = session.as_mut().read_body_or_idle(true) => {
                if r.is_err() {
                    return false;
                }
            }
        }
    }
    sleep.await;
    true
}
