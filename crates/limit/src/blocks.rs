//! Automatic blocks: an escalation ladder over a limit's refusals.
//!
//! A [`Ladder`] counts, per key, how often a limit refused it; each [`Rung`] says "refused
//! `after` times within `within`: blocked for `block_for`". Every rung counts every refusal (a
//! request answered "blocked" counts too, so a client that keeps hammering climbs to the next
//! rung). A block is fixed when imposed: further refusals do not prolong it, only a higher rung
//! replaces it with its longer one. The counts are sliding windows (the weighted estimate of
//! two fixed windows, as Cloudflare and the `sliding_window` algorithm do).
//!
//! [`BlockTable`] holds the blocks: sharded, bounded (full: expired entries go first, then the
//! ones ending soonest), and free to check while empty (one atomic load: the common case).
//! Keys are the caller's 64-bit hashes; time is the caller's clock.

use crate::clock::Nanos;
use crate::decision::Rate;
use crate::store::{KeyedStore, LocalLimiter};
use crate::windows::SlidingWindow;
use foldhash::fast::FixedState;
use hashbrown::HashMap;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// One step of a ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rung {
    /// Refusals that trip the rung (at least 1).
    pub after: u64,
    /// The window they are counted in.
    pub within: Duration,
    /// How long the key is blocked once tripped.
    pub block_for: Duration,
}

/// A block in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub until: Nanos,
    /// Index of the rung that imposed it (higher rungs block longer).
    pub rung: u8,
}

#[repr(align(128))]
struct Shard {
    map: RwLock<HashMap<u64, Block, FixedState>>,
}

pub struct BlockTable {
    shards: Box<[Shard]>,
    shard_cap: usize,
    /// Entries in the maps (expired ones included until swept): zero means nothing to look up.
    len: AtomicUsize,
}

const SHARDS: usize = 16;

fn ns(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl BlockTable {
    pub fn new(max_entries: usize) -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| Shard {
                    map: RwLock::new(HashMap::with_hasher(FixedState::default())),
                })
                .collect(),
            shard_cap: max_entries.max(SHARDS).div_ceil(SHARDS),
            len: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn shard(&self, key: u64) -> &Shard {
        &self.shards[(key >> 60) as usize % SHARDS]
    }

    /// The remaining block of `key` at `now`, if any.
    #[inline]
    pub fn check(&self, key: u64, now: Nanos) -> Option<Nanos> {
        if self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let until = self.shard(key).map.read().get(&key)?.until;
        (until > now).then(|| until - now)
    }

    /// The block of `key` in force at `now`.
    pub fn get(&self, key: u64, now: Nanos) -> Option<Block> {
        if self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.shard(key)
            .map
            .read()
            .get(&key)
            .copied()
            .filter(|b| b.until > now)
    }

    /// Blocks `key` until `block.until` unless a block from a rung at least as high is in
    /// force. True when this changed the table.
    pub fn impose(&self, key: u64, block: Block, now: Nanos) -> bool {
        let mut map = self.shard(key).map.write();
        if let Some(b) = map.get_mut(&key) {
            if b.until > now && b.rung >= block.rung {
                return false;
            }
            *b = block;
            return true;
        }
        if map.len() >= self.shard_cap {
            let before = map.len();
            map.retain(|_, b| b.until > now);
            if map.len() >= self.shard_cap {
                // Full of live blocks: the ones ending soonest make room.
                let excess = (map.len() - self.shard_cap + 1).max(self.shard_cap / 8);
                let mut ends: Vec<Nanos> = map.values().map(|b| b.until).collect();
                let (_, &mut cutoff, _) = ends.select_nth_unstable(excess - 1);
                let mut dropped = 0;
                map.retain(|_, b| {
                    let drop = dropped < excess && b.until <= cutoff;
                    dropped += drop as usize;
                    !drop
                });
            }
            self.len.fetch_sub(before - map.len(), Ordering::Relaxed);
        }
        map.insert(key, block);
        self.len.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Lifts the block of `key`. True if one was in force.
    pub fn lift(&self, key: u64, now: Nanos) -> bool {
        match self.shard(key).map.write().remove(&key) {
            Some(b) => {
                self.len.fetch_sub(1, Ordering::Relaxed);
                b.until > now
            }
            None => false,
        }
    }

    /// Lifts every block; returns how many were in force.
    pub fn lift_all(&self, now: Nanos) -> usize {
        let mut n = 0;
        for s in self.shards.iter() {
            let mut map = s.map.write();
            n += map.values().filter(|b| b.until > now).count();
            self.len.fetch_sub(map.len(), Ordering::Relaxed);
            map.clear();
        }
        n
    }

    /// Blocks in force at `now`, as (key, block); expired entries are swept on the way.
    pub fn list(&self, now: Nanos) -> Vec<(u64, Block)> {
        let mut out = Vec::new();
        if self.len.load(Ordering::Relaxed) == 0 {
            return out;
        }
        for s in self.shards.iter() {
            let mut map = s.map.write();
            let before = map.len();
            map.retain(|_, b| b.until > now);
            self.len.fetch_sub(before - map.len(), Ordering::Relaxed);
            out.extend(map.iter().map(|(k, b)| (*k, *b)));
        }
        out.sort_by_key(|(k, _)| *k);
        out
    }

    /// Blocks in force at `now`.
    pub fn active(&self, now: Nanos) -> usize {
        if self.len.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        self.shards
            .iter()
            .map(|s| s.map.read().values().filter(|b| b.until > now).count())
            .sum()
    }
}

/// Refusal counters per rung, and the blocks they impose.
pub struct Ladder {
    rungs: Vec<(Rung, Option<KeyedStore<SlidingWindow>>)>,
    pub blocks: BlockTable,
}

/// A rung that tripped: the key is blocked from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tripped {
    pub rung: u8,
    pub block_for: Duration,
    pub until: Nanos,
}

impl Ladder {
    /// `rungs` in any order (they are sorted by block length: the longest is the highest);
    /// `max_keys` bounds both the counters and the blocks.
    pub fn new(rungs: &[Rung], max_keys: usize) -> Self {
        let mut rungs = rungs.to_vec();
        rungs.sort_by_key(|r| (r.block_for, r.after));
        Self {
            rungs: rungs
                .into_iter()
                .map(|r| {
                    // Counting `after - 1` admits the first refusals; the `after`-th is the one
                    // the window refuses: it trips the rung. A rung of 1 trips at once.
                    // (A zero window, which the config refuses, would trip at once too.)
                    let counter = (r.after > 1)
                        .then(|| Rate::new(r.after - 1, r.within).ok())
                        .flatten()
                        .map(|rate| {
                            KeyedStore::new(SlidingWindow::new(rate, r.after - 1), max_keys)
                        });
                    (r, counter)
                })
                .collect(),
            blocks: BlockTable::new(max_keys),
        }
    }

    /// Lifts the key's block and clears its refusal counts (an operator's pardon: the key
    /// starts from the bottom of the ladder). True if a block was in force.
    pub fn forgive(&self, key: u64, now: Nanos) -> bool {
        for c in self.rungs.iter().filter_map(|(_, c)| c.as_ref()) {
            c.forget(key);
        }
        self.blocks.lift(key, now)
    }

    /// Lifts every block and clears every count; returns how many blocks were in force.
    pub fn forgive_all(&self, now: Nanos) -> usize {
        for c in self.rungs.iter().filter_map(|(_, c)| c.as_ref()) {
            c.forget_all();
        }
        self.blocks.lift_all(now)
    }

    pub fn rungs(&self) -> impl Iterator<Item = &Rung> {
        self.rungs.iter().map(|(r, _)| r)
    }

    /// Counts one refusal of `key` at `now`; the highest rung it trips blocks the key (unless
    /// a block at least as high is in force). Returns the block imposed, if any.
    pub fn refused(&self, key: u64, now: Nanos) -> Option<Tripped> {
        let mut top = None;
        for (i, (rung, counter)) in self.rungs.iter().enumerate() {
            let tripped = match counter {
                None => true,
                Some(c) => !c.acquire(key, now, 1).is_allowed(),
            };
            if tripped {
                top = Some((i, rung));
            }
        }
        let (i, rung) = top?;
        let block = Block {
            until: now.saturating_add(ns(rung.block_for)),
            rung: u8::try_from(i).unwrap_or(u8::MAX),
        };
        self.blocks.impose(key, block, now).then_some(Tripped {
            rung: block.rung,
            block_for: rung.block_for,
            until: block.until,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    const SEC: Nanos = 1_000_000_000;

    fn ladder() -> Ladder {
        Ladder::new(
            &[
                Rung {
                    after: 100,
                    within: Duration::from_secs(300),
                    block_for: Duration::from_secs(3600),
                },
                Rung {
                    after: 10,
                    within: Duration::from_secs(60),
                    block_for: Duration::from_secs(300),
                },
            ],
            1000,
        )
    }

    #[test]
    fn ten_refusals_in_a_minute_block_for_five_minutes_then_a_hundred_for_an_hour() {
        let clock = ManualClock::new(1_000 * SEC);
        let l = ladder();
        let k = 42;
        for i in 1..10 {
            assert_eq!(
                l.refused(k, clock.now()),
                None,
                "refusal {i} does not block"
            );
            clock.advance(Duration::from_secs(1));
        }
        assert_eq!(l.blocks.check(k, clock.now()), None);
        let t = l.refused(k, clock.now()).expect("the 10th refusal blocks");
        assert_eq!((t.rung, t.block_for), (0, Duration::from_secs(300)));
        assert_eq!(l.blocks.check(k, clock.now()), Some(300 * SEC));
        assert_eq!(l.blocks.check(7, clock.now()), None, "other keys pass");
        // More refusals while blocked do not prolong the block...
        clock.advance(Duration::from_secs(10));
        assert_eq!(l.refused(k, clock.now()), None);
        assert_eq!(l.blocks.check(k, clock.now()), Some(290 * SEC));
        // ...until they reach the next rung: 100 within 5 minutes blocks for an hour.
        let mut escalated = None;
        for _ in 0..100 {
            clock.advance(Duration::from_secs(1));
            if let Some(t) = l.refused(k, clock.now()) {
                escalated = Some(t);
                break;
            }
        }
        let t = escalated.expect("escalates");
        assert_eq!((t.rung, t.block_for), (1, Duration::from_secs(3600)));
        assert_eq!(l.blocks.check(k, clock.now()), Some(3600 * SEC));
        // A pardon starts the key from the bottom of the ladder.
        assert!(l.forgive(k, clock.now()));
        assert_eq!(l.blocks.check(k, clock.now()), None);
        assert_eq!(l.refused(k, clock.now()), None, "counts cleared");
        l.blocks.impose(
            k,
            Block {
                until: clock.now() + 3600 * SEC,
                rung: 1,
            },
            clock.now(),
        );
        // An hour later the key is free again.
        clock.advance(Duration::from_secs(3600));
        assert_eq!(l.blocks.check(k, clock.now()), None);
        assert!(l.blocks.list(clock.now()).is_empty());
    }

    #[test]
    fn refusals_spread_thinner_than_the_window_never_block() {
        let clock = ManualClock::new(1_000 * SEC);
        let l = ladder();
        // One refusal every 10 s: at most ~6 per minute.
        for _ in 0..200 {
            assert_eq!(l.refused(1, clock.now()), None);
            clock.advance(Duration::from_secs(10));
        }
    }

    #[test]
    fn lifting_unblocks_and_the_table_stays_bounded() {
        let clock = ManualClock::new(SEC);
        let t = BlockTable::new(64);
        let b = |s: u64| Block {
            until: SEC + s * SEC,
            rung: 0,
        };
        for k in 0..1000u64 {
            t.impose(
                k.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                b(10 + k),
                clock.now(),
            );
        }
        assert!(t.list(clock.now()).len() <= 64 + SHARDS);
        let (k, _) = t.list(clock.now())[0];
        assert!(t.get(k, clock.now()).is_some());
        assert!(t.lift(k, clock.now()));
        assert_eq!(t.check(k, clock.now()), None);
        assert!(!t.lift(k, clock.now()));
        assert!(t.lift_all(clock.now()) > 0);
        assert_eq!(t.active(clock.now()), 0);
        assert_eq!(t.check(1, clock.now()), None);
    }

    #[test]
    fn a_rung_of_one_blocks_at_the_first_refusal() {
        let l = Ladder::new(
            &[Rung {
                after: 1,
                within: Duration::from_secs(1),
                block_for: Duration::from_secs(5),
            }],
            10,
        );
        assert!(l.refused(9, SEC).is_some());
        assert_eq!(l.blocks.check(9, SEC), Some(5 * SEC));
    }
}
