//! Active health checks of upstream targets, as a Pingora background service.
//!
//! Each tick looks at the current runtime (so reloads are picked up) and checks every pool
//! whose interval has passed. A target that fails its TCP check is taken out of rotation until
//! it passes again; results live in the pool, which reloads carry over when unchanged.
//!
//! The same service probes Redis (PING, and the scripts loaded again after an outage) once a
//! second, so its state on /readyz and `tollgate_redis_up` is current without traffic, and an
//! open breaker closes as soon as Redis answers again. It also polls the shared block registry
//! once a second, so a block (or a lift) made by one instance applies on all of them.
//!
//! Budget leases (`sync = "lease"`): slices that ended while their key was quiet are found
//! every tick and their unspent units given back to Redis; at shutdown every slice is.

use crate::policy::give_back_lease;
use crate::runtime::{LimitState, Runtime, Shared};
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct HealthChecks {
    shared: Arc<Shared>,
    blocks: Arc<BlockSync>,
}

impl HealthChecks {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            blocks: Arc::new(BlockSync::default()),
        }
    }
}

const TICK: Duration = Duration::from_millis(50);
const REDIS_PROBE_EVERY: Duration = Duration::from_secs(1);
const LEASE_SWEEP_EVERY: Duration = Duration::from_millis(200);
const HOLD_CHECK_EVERY: Duration = Duration::from_millis(250);

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
                };
                let _ = store.hold(&spec, key, n).await;
            }
        });
    }
    renewed.retain(|id, _| live.contains(id));
}

#[async_trait]
impl BackgroundService for HealthChecks {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        // Next due time per pool, keyed by the pool's address (pools are shared across reloads).
        let mut due: HashMap<usize, Instant> = HashMap::new();
        // The last probe's start (None: none yet); one probe at a time.
        let mut probed_at: Option<Instant> = None;
        let probing = Arc::new(AtomicBool::new(false));
        let mut blocks_due = Instant::now();
        let mut sweep_due = Instant::now();
        let mut leases_due = Instant::now();
        let mut holds_due = Instant::now();
        let mut renewed: HashMap<usize, Instant> = HashMap::new();
        loop {
            if Instant::now() >= sweep_due {
                sweep_due = Instant::now() + REDIS_PROBE_EVERY;
                sweep_blocks(&self.shared);
            }
            if Instant::now() >= leases_due {
                // A fifth of a slice's ttl: unspent units go back at most 0.2 s late.
                leases_due = Instant::now() + LEASE_SWEEP_EVERY;
                sweep_leases(&self.shared);
            }
            if let Some(store) = &self.shared.store {
                // Once a second; sooner while a node is down or a cluster's map is stale.
                let due = probed_at.is_none_or(|t| t.elapsed() >= store.probe_every());
                if due && !probing.swap(true, Ordering::AcqRel) {
                    probed_at = Some(Instant::now());
                    let (store, probing) = (store.clone(), probing.clone());
                    // Bounded by the store's own timeouts; never blocks the loop.
                    tokio::spawn(async move {
                        let _ = store.probe().await;
                        probing.store(false, Ordering::Release);
                    });
                }
                if Instant::now() >= blocks_due {
                    blocks_due = Instant::now() + REDIS_PROBE_EVERY;
                    let (shared, sync) = (self.shared.clone(), self.blocks.clone());
                    tokio::spawn(async move { sync_blocks(&shared, &sync).await });
                }
            }
            let rt = self.shared.runtime.load_full();
            let now = Instant::now();
            if now >= holds_due {
                holds_due = now + HOLD_CHECK_EVERY;
                renew_slots(&rt, now, &mut renewed);
            }
            for u in &rt.upstreams {
                // Names are looked up again every resolve_every, one round at a time.
                if u.pool.claim_resolve(now) {
                    let pool = u.pool.clone();
                    tokio::spawn(async move { pool.resolve().await });
                }
            }
            let mut live = Vec::with_capacity(rt.upstreams.len());
            for u in &rt.upstreams {
                let Some(hc) = u.cfg.health_check else {
                    continue;
                };
                let id = Arc::as_ptr(&u.pool) as usize;
                live.push(id);
                if due.get(&id).is_some_and(|t| *t > now) {
                    continue;
                }
                due.insert(id, now + hc.interval);
                let pool = u.pool.clone();
                // Each probe is bounded by the timeout; a round never blocks the others.
                tokio::spawn(async move { pool.check(hc.timeout).await });
            }
            due.retain(|id, _| live.contains(id));
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = shutdown.changed() => {
                    return_leases(&self.shared).await;
                    return;
                }
            }
        }
    }
}

/// Where this instance is in the shared block registry's change log, and whether a sync runs.
#[derive(Default)]
pub struct BlockSync {
    since: AtomicU64,
    running: AtomicBool,
}

/// Applies what changed in the shared block registry to this instance's ladders: blocks made
/// elsewhere are imposed here, lifted ones are lifted. One sync at a time; at most 20 pages of
/// 500 changes per sync (the rest follows a second later).
pub async fn sync_blocks(shared: &Shared, sync: &BlockSync) {
    let rt = shared.runtime.load_full();
    if !rt.limits.iter().any(|l| l.ladder.is_some()) {
        return;
    }
    let Some(store) = &shared.store else {
        return;
    };
    if sync.running.swap(true, Ordering::AcqRel) {
        return;
    }
    for _ in 0..20 {
        let Ok(changes) = store.blocks(sync.since.load(Ordering::Acquire)).await else {
            break;
        };
        let now = shared.clock.now();
        for b in &changes.blocks {
            let Some(lad) = rt
                .limits
                .iter()
                .find(|l| l.cfg.name == b.limit)
                .and_then(|l| l.ladder.as_ref())
            else {
                continue;
            };
            if b.lifted {
                if lad.ladder.blocks.get(b.key, now).is_some() {
                    lad.ladder.forgive(b.key, now);
                }
            } else {
                let until =
                    now.saturating_add(u64::try_from(b.remaining.as_nanos()).unwrap_or(u64::MAX));
                lad.ladder.blocks.impose(
                    b.key,
                    tollgate_limit::Block {
                        until,
                        rung: b.rung,
                    },
                    now,
                );
            }
        }
        sync.since.store(changes.next, Ordering::Release);
        if !changes.more {
            break;
        }
    }
    sync.running.store(false, Ordering::Release);
}

/// Ends the blocks that ran out, so that a table with none left is free to check again.
fn sweep_blocks(shared: &Shared) {
    let rt = shared.runtime.load();
    let now = shared.clock.now();
    for l in &rt.limits {
        if let Some(lad) = &l.ladder {
            lad.ladder.blocks.sweep(now);
        }
    }
}

/// Gives back to Redis the unspent units of lease slices that ended while their key was quiet.
fn sweep_leases(shared: &Shared) {
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
async fn return_leases(shared: &Shared) {
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
