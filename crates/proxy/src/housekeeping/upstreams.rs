//! Upstream names and health: names the cluster places take its endpoints within a tick,
//! the others are looked up again every `resolve_every` (one round at a time); and the TCP
//! health checks, one per distinct target address and timeout however many upstreams name
//! it ([`tollgate_upstream::health`]). A target that fails its check is taken out of
//! rotation until it passes again; results live in the pool, which reloads carry over when
//! unchanged. Targets ejected as outliers ([`tollgate_upstream::outlier`]) come back here
//! when their time is up.

use crate::runtime::Runtime;
use std::sync::Arc;
use std::time::Instant;
use tollgate_upstream::health::HealthRounds;

/// Takes up the cluster's newest placements ([`tollgate_upstream::placed`]), then starts
/// the lookups that are due.
pub fn resolve(rt: &Runtime, now: Instant) {
    for u in &rt.upstreams {
        if u.pool.placement_due() {
            u.pool.place();
        }
        if u.pool.claim_resolve(now) {
            let pool = u.pool.clone();
            tokio::spawn(async move { pool.resolve().await });
        }
    }
}

/// The health rounds over the current runtime's upstreams.
#[derive(Default)]
pub struct Health {
    rounds: HealthRounds,
    /// The runtime the rounds were grouped from, held so that a new one is never taken for it
    /// (a freed runtime's address can be reused), and a count of the runtimes seen.
    rt: Option<Arc<Runtime>>,
    set: usize,
}

impl Health {
    /// Starts the probes that are due, each in its own task bounded by its timeout: a round
    /// never blocks the others.
    pub fn run(&mut self, rt: &Arc<Runtime>, now: Instant) {
        if !self.rt.as_ref().is_some_and(|r| Arc::ptr_eq(r, rt)) {
            self.rt = Some(rt.clone());
            self.set += 1;
        }
        let pools = || rt.upstreams.iter().map(|u| &u.pool);
        for probe in self.rounds.due(self.set, pools, now) {
            tokio::spawn(probe.run());
        }
        for r in tollgate_upstream::outlier::EJECTIONS.lift(now) {
            tracing::info!(event = "upstream_target_returned", upstream = %r.upstream,
                target = %r.addr, "ejected upstream target back in rotation");
        }
    }
}
