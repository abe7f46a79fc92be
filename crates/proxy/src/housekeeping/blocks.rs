//! Blocks across the fleet: the shared block registry polled once a second, so a block (or a
//! lift) made by one instance applies on all of them; and blocks that ran out ended, so that a
//! table with none left is free to check again.

use crate::shared::Shared;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// Where this instance is in the shared block registry's change log, and whether a sync runs.
#[derive(Default)]
pub struct BlockSync {
    since: AtomicU64,
    running: AtomicBool,
}

/// Applies what changed in the shared block registry to this instance's ladders: blocks made
/// elsewhere are imposed here, lifted ones are lifted. One sync at a time; at most 20 pages of
/// 500 changes per sync (the rest follows a second later).
pub async fn sync(shared: &Shared, sync: &BlockSync) {
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
pub fn sweep(shared: &Shared) {
    let rt = shared.runtime.load();
    let now = shared.clock.now();
    for l in &rt.limits {
        if let Some(lad) = &l.ladder {
            lad.ladder.blocks.sweep(now);
        }
    }
}
