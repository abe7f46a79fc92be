//! Budget leases (`sync = "lease"`): slices that ended while their key was quiet are found
//! every 200 ms (a fifth of a slice's ttl: unspent units go back at most 0.2 s late) and their
//! unspent units given back to Redis; at shutdown every slice is.

use crate::limits::compiled::LimitState;
use crate::limits::policy::give_back_lease;
use crate::shared::Shared;
use std::time::Duration;

pub const SWEEP_EVERY: Duration = Duration::from_millis(200);

/// Gives back to Redis the unspent units of lease slices that ended while their key was quiet.
pub fn sweep(shared: &Shared) {
    let rt = shared.runtime.load();
    let now = shared.clock.now();
    let mut ended = Vec::new();
    for l in &rt.limits {
        if let LimitState::Global(g) = &l.state {
            if let Some(leases) = &g.leases {
                ended.clear();
                leases.sweep(now, &mut ended);
                for &(key, units) in &ended {
                    give_back_lease(g, key, units);
                }
            }
        }
    }
}

/// At shutdown: every slice ends and its unspent units go back to Redis (within a second).
pub async fn return_all(shared: &Shared) {
    let rt = shared.runtime.load_full();
    let mut calls = Vec::new();
    for l in &rt.limits {
        let LimitState::Global(g) = &l.state else {
            continue;
        };
        let Some(leases) = &g.leases else {
            continue;
        };
        let mut held = Vec::new();
        leases.drain(&mut held);
        for (key, units) in held {
            g.lease_returned.inc_by(units);
            calls.push(async move {
                let key = tollgate_store::GlobalKey {
                    limit: &g.name,
                    key,
                    known: true,
                    patient: false,
                };
                let _ = g.store.refund(&g.spec, key, units).await;
            });
        }
    }
    if !calls.is_empty() {
        let n = calls.len();
        let done = tokio::time::timeout(
            Duration::from_secs(1),
            futures_util::future::join_all(calls),
        )
        .await
        .is_ok();
        tracing::info!(
            event = "leases_returned",
            slices = n,
            done,
            "lease slices given back to Redis at shutdown"
        );
    }
}
