//! Upstream names and health: names looked up again every `resolve_every` (one round at a
//! time), and each pool's TCP health check at its `interval`. A target that fails its check is
//! taken out of rotation until it passes again; results live in the pool, which reloads carry
//! over when unchanged.

use crate::runtime::Runtime;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Starts the lookups that are due.
pub fn resolve(rt: &Runtime, now: Instant) {
    for u in &rt.upstreams {
        if u.pool.claim_resolve(now) {
            let pool = u.pool.clone();
            tokio::spawn(async move { pool.resolve().await });
        }
    }
}

/// Next due time per pool, keyed by the pool's address (pools are shared across reloads).
#[derive(Default)]
pub struct HealthRounds {
    due: HashMap<usize, Instant>,
}

impl HealthRounds {
    /// Starts the health rounds that are due; each probe is bounded by its timeout, and a
    /// round never blocks the others.
    pub fn run(&mut self, rt: &Runtime, now: Instant) {
        let mut live = Vec::with_capacity(rt.upstreams.len());
        for u in &rt.upstreams {
            let Some(hc) = u.cfg.health_check else {
                continue;
            };
            let id = Arc::as_ptr(&u.pool) as usize;
            live.push(id);
            if self.due.get(&id).is_some_and(|t| *t > now) {
                continue;
            }
            self.due.insert(id, now + hc.interval);
            let pool = u.pool.clone();
            tokio::spawn(async move { pool.check(hc.timeout).await });
        }
        self.due.retain(|id, _| live.contains(id));
    }
}
