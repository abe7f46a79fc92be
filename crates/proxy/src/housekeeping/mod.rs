//! The gateway's background jobs, one Pingora background service ticking every 50 ms. Each
//! job is one file, named for what it keeps true, with how often it runs:
//!
//! - [`upstreams`]: names looked up again every `resolve_every`; the TCP health checks, one
//!   per distinct target address and timeout at the shortest `interval` of the upstreams
//!   naming it (a target that fails leaves rotation until it passes).
//! - [`redis`]: Redis probed once a second (sooner while a node is down or a cluster's map is
//!   stale), so `/readyz` and `tollgate_redis_up` are current without traffic and an open
//!   breaker closes as soon as Redis answers.
//! - [`blocks`]: the shared block registry polled once a second (a block or a lift made by one
//!   instance applies on all), and blocks that ran out ended.
//! - [`leases`]: slices that ended while their key was quiet give their unspent units back to
//!   Redis every 200 ms; at shutdown every slice does.
//! - [`slots`]: the slots this gateway holds in global concurrency limits renewed every third
//!   of their `slot_ttl`.
//! - [`jwks`]: `[jwt] jwks_url`'s key set fetched at start, then per its max-age (sooner
//!   after a failure).
//!
//! - [`traces`]: trace spans exported to the OTLP collector every second (sooner when a
//!   batch is full), one export at a time.
//!
//! Each tick reads the current runtime, so reloads are picked up. Jobs that call Redis or
//! connect run in tasks of their own, bounded by their own timeouts: none blocks the tick.

mod blocks;
mod jwks;
mod leases;
mod redis;
mod slots;
mod traces;
mod upstreams;

use crate::shared::Shared;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(50);

/// When a job is next due.
struct Due {
    every: Duration,
    next: Instant,
}

impl Due {
    fn new(every: Duration) -> Self {
        Self {
            every,
            next: Instant::now(),
        }
    }

    /// Whether the job runs now (and when it runs next).
    fn now(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        self.next = now + self.every;
        true
    }
}

pub struct Housekeeping {
    shared: Arc<Shared>,
    blocks: Arc<blocks::BlockSync>,
}

impl Housekeeping {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            blocks: Arc::new(blocks::BlockSync::default()),
        }
    }
}

#[async_trait]
impl BackgroundService for Housekeeping {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut health = upstreams::Health::default();
        let mut probe = redis::Probe::default();
        let mut renewed = slots::Renewals::default();
        let mut block_poll = Due::new(blocks::POLL_EVERY);
        let mut block_sweep = Due::new(blocks::POLL_EVERY);
        let mut lease_sweep = Due::new(leases::SWEEP_EVERY);
        let mut slot_renewal = Due::new(slots::CHECK_EVERY);
        let mut trace_export = Due::new(tollgate_core::observe::traces::EXPORT_EVERY);
        loop {
            let now = Instant::now();
            if block_sweep.now(now) {
                blocks::sweep(&self.shared);
            }
            if lease_sweep.now(now) {
                leases::sweep(&self.shared);
            }
            traces::run(&self.shared, &mut trace_export, now);
            if let Some(store) = &self.shared.store {
                probe.run(store);
                if block_poll.now(now) {
                    let (shared, sync) = (self.shared.clone(), self.blocks.clone());
                    tokio::spawn(async move { blocks::sync(&shared, &sync).await });
                }
            }
            let rt = self.shared.runtime.load_full();
            if slot_renewal.now(now) {
                renewed.run(&rt, now);
            }
            jwks::refresh(&self.shared, &rt, now);
            upstreams::resolve(&rt, now);
            health.run(&rt, now);
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = shutdown.changed() => {
                    leases::return_all(&self.shared).await;
                    traces::flush(&self.shared).await;
                    return;
                }
            }
        }
    }
}
