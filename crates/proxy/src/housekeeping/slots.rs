//! Global concurrency slots: the slots this gateway holds are renewed in Redis every third of
//! their limit's `slot_ttl` (so two renewals can fail before Redis forgets them; a gateway
//! that stops renewing, a crash, has its slots back after `slot_ttl`).

use crate::limits::compiled::LimitState;
use crate::runtime::Runtime;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const CHECK_EVERY: Duration = Duration::from_millis(250);

/// When each limit's slots were last renewed, keyed by its held-slots table's address.
#[derive(Default)]
pub struct Renewals(HashMap<usize, Instant>);

impl Renewals {
    pub fn run(&mut self, rt: &Runtime, now: Instant) {
        renew_slots(rt, now, &mut self.0);
    }
}

/// Renews in Redis the slots this gateway holds in global concurrency limits, every third of
/// their `slot_ttl` (so two renewals can fail before Redis forgets them).
fn renew_slots(rt: &Runtime, now: Instant, renewed: &mut HashMap<usize, Instant>) {
    let mut live = Vec::new();
    for l in &rt.limits {
        let LimitState::Global(g) = &l.state else {
            continue;
        };
        let Some(held) = &g.held else {
            continue;
        };
        let id = Arc::as_ptr(held) as usize;
        live.push(id);
        let every = l.cfg.rate.period() / 3;
        if renewed.get(&id).is_some_and(|t| now < *t + every) {
            continue;
        }
        renewed.insert(id, now);
        let keys = held.snapshot();
        if keys.is_empty() {
            continue;
        }
        let (store, spec, name) = (g.store.clone(), g.spec, g.name.clone());
        tokio::spawn(async move {
            for (key, n) in keys {
                // Known: a renewal shed under a flood would let the slots lapse.
                let key = tollgate_store::GlobalKey {
                    limit: &name,
                    key,
                    known: true,
                    patient: false,
                };
                let _ = store.hold(&spec, key, n).await;
            }
        });
    }
    renewed.retain(|id, _| live.contains(id));
}
