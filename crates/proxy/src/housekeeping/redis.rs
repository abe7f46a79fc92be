//! The Redis probe: PING (and the scripts loaded again after an outage, a cluster's slot map
//! read) once a second, sooner while a node is down or the map is stale, so `/readyz` and
//! `tollgate_redis_up` are current without traffic and an open breaker closes as soon as
//! Redis answers. One probe at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tollgate_store::GlobalStore;

#[derive(Default)]
pub struct Probe {
    /// The last probe's start (None: none yet).
    probed_at: Option<Instant>,
    probing: Arc<AtomicBool>,
}

impl Probe {
    /// Starts a probe when one is due and none runs; bounded by the store's own timeouts.
    pub fn run(&mut self, store: &Arc<dyn GlobalStore>) {
        let due = self
            .probed_at
            .is_none_or(|t| t.elapsed() >= store.probe_every());
        if due && !self.probing.swap(true, Ordering::AcqRel) {
            self.probed_at = Some(Instant::now());
            let (store, probing) = (store.clone(), self.probing.clone());
            tokio::spawn(async move {
                let _ = store.probe().await;
                probing.store(false, Ordering::Release);
            });
        }
    }
}
