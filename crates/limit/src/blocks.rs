//! Automatic blocks: an escalation ladder over a limit's refusals.
//!
//! A [`Ladder`] counts, per key, how often a limit refused it; each [`Rung`] says "refused
//! `after` times within `within`: blocked for `block_for`". Every rung counts every refusal (a
//! request answered "blocked" counts too, so a client that keeps hammering climbs to the next
//! rung). A block is fixed when imposed: further refusals do not prolong it, only a higher rung
//! replaces it with its longer one. The counts are sliding windows (the weighted estimate of
//! two fixed windows, as Cloudflare and the `sliding_window` algorithm do).
//!
//! [`BlockTable`] holds the blocks: sharded, free to check while empty (one atomic load: the
//! common case), and bounded. It is a table of its own, apart from the refusal counters.
//!
//! **Nothing that says "this key is bad" gives way to a newcomer.** Whoever can mint keys (a
//! header, a token, an address from a large pool) can fill any bounded table with keys of
//! their own; any rule that drops an entry in force to make room (the block "ending soonest",
//! the oldest, the least recently used) is then theirs to steer: their first key's block ends
//! soonest, so 100,000 fresh blocks lift it. So:
//!
//! - A block leaves the table only when it ends or is lifted. A full shard reclaims the blocks
//!   that ended (one scan, once an eighth of the blocks it held at its last scan have ended:
//!   a flood into a full shard costs O(1) per key; the periodic [`BlockTable::sweep`]
//!   reclaims the rest); if none can go, the new block is refused and counted
//!   ([`BlockTable::refused_full`]: a table too small for the keys being blocked, or a flood).
//!   A refused block costs the key only its block: its limit keeps refusing it.
//! - The refusal counts of a rung are kept by [`KeyedStore::acquire_or_skip`]: a new key
//!   displaces only a count that weighs no more than the one refusal it brings (one that ended,
//!   or one refusal at most, fading); a key with more refusals in its window than a fresh key
//!   outlives any flood of fresh keys. When none weighs that little, the new key is not counted
//!   ([`Ladder::untracked`]): it is still limited, it just does not climb the ladder until
//!   counts end. (A single counted refusal can give way to another fresh one: either loses the
//!   same, and which one goes depends on the process's keyed hashes, not on the client.)
//!
//! Keys are the caller's 64-bit hashes; time is the caller's clock.

use crate::clock::Nanos;
use crate::decision::Rate;
use crate::store::{KeyedStore, LocalLimiter};
use crate::windows::SlidingWindow;
use foldhash::fast::FixedState;
use hashbrown::HashMap;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    table: RwLock<Table>,
}

struct Table {
    map: HashMap<u64, Block, FixedState>,
    /// When a full shard may scan for blocks that ended: once an eighth of the blocks it held
    /// at its last scan have ended (the periodic [`BlockTable::sweep`] reclaims sooner), so a
    /// flood into a full shard costs O(1) per key and each scan frees a share of it.
    next_reclaim: Nanos,
}

pub struct BlockTable {
    shards: Box<[Shard]>,
    shard_cap: usize,
    /// Entries in the maps (expired ones included until swept): zero means nothing to look up.
    len: AtomicUsize,
    /// Blocks refused because their shard was full of blocks in force.
    refused_full: AtomicU64,
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
                    table: RwLock::new(Table {
                        map: HashMap::with_hasher(FixedState::default()),
                        next_reclaim: 0,
                    }),
                })
                .collect(),
            shard_cap: max_entries.max(SHARDS).div_ceil(SHARDS),
            len: AtomicUsize::new(0),
            refused_full: AtomicU64::new(0),
        }
    }

    /// The most entries the table holds (ended blocks not yet swept included): `max_entries`
    /// rounded up to a multiple of the shard count.
    pub fn capacity(&self) -> usize {
        self.shard_cap * SHARDS
    }

    /// Entries in the table, ended blocks not yet swept included (at most [`Self::capacity`]).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Blocks refused so far because their shard was full of blocks in force (a counter: the
    /// table is too small for the keys being blocked, or someone is minting keys to fill it).
    pub fn refused_full(&self) -> u64 {
        self.refused_full.load(Ordering::Relaxed)
    }

    #[inline]
    fn shard(&self, key: u64) -> &Shard {
        &self.shards[(key >> 60) as usize % SHARDS]
    }

    /// The remaining block of `key` at `now`, if any. An expired entry found here is removed
    /// (and [`BlockTable::sweep`] removes the rest), so the table is free to check again once
    /// every block has ended.
    #[inline]
    pub fn check(&self, key: u64, now: Nanos) -> Option<Nanos> {
        if self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let shard = self.shard(key);
        let until = shard.table.read().map.get(&key)?.until;
        if until > now {
            return Some(until - now);
        }
        let map = &mut shard.table.write().map;
        if map.get(&key).is_some_and(|b| b.until <= now) {
            map.remove(&key);
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        None
    }

    /// Removes the blocks that ended by `now`.
    pub fn sweep(&self, now: Nanos) {
        if self.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        for s in self.shards.iter() {
            if s.table.read().map.values().all(|b| b.until > now) {
                continue;
            }
            let map = &mut s.table.write().map;
            let before = map.len();
            map.retain(|_, b| b.until > now);
            self.len.fetch_sub(before - map.len(), Ordering::Relaxed);
        }
    }

    /// The block of `key` in force at `now`.
    pub fn get(&self, key: u64, now: Nanos) -> Option<Block> {
        if self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.shard(key)
            .table
            .read()
            .map
            .get(&key)
            .copied()
            .filter(|b| b.until > now)
    }

    /// Blocks `key` until `block.until` unless a block from a rung at least as high is in
    /// force, or the key's shard is full of blocks in force (then the block is refused and
    /// counted in [`Self::refused_full`]: no block in force ever gives way to a new one). True
    /// when this changed the table.
    pub fn impose(&self, key: u64, block: Block, now: Nanos) -> bool {
        let mut t = self.shard(key).table.write();
        if let Some(b) = t.map.get_mut(&key) {
            if b.until > now && b.rung >= block.rung {
                return false;
            }
            *b = block;
            return true;
        }
        if t.map.len() >= self.shard_cap && !self.reclaim(&mut t, now) {
            self.refused_full.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        t.map.insert(key, block);
        self.len.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Makes room in a full shard by dropping the blocks that ended (lossless), and only those.
    /// False when none can go (every block is in force, or too few have ended since the last
    /// scan to pay for another: see [`Table::next_reclaim`]).
    fn reclaim(&self, t: &mut Table, now: Nanos) -> bool {
        if now < t.next_reclaim {
            return false;
        }
        let before = t.map.len();
        t.map.retain(|_, b| b.until > now);
        self.len.fetch_sub(before - t.map.len(), Ordering::Relaxed);
        let mut ends: Vec<Nanos> = t.map.values().map(|b| b.until).collect();
        let k = (self.shard_cap / 8).max(1);
        t.next_reclaim = if ends.len() >= k {
            *ends.select_nth_unstable(k - 1).1
        } else {
            0
        };
        t.map.len() < self.shard_cap
    }

    /// Lifts the block of `key`. True if one was in force.
    pub fn lift(&self, key: u64, now: Nanos) -> bool {
        match self.shard(key).table.write().map.remove(&key) {
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
            let mut t = s.table.write();
            n += t.map.values().filter(|b| b.until > now).count();
            self.len.fetch_sub(t.map.len(), Ordering::Relaxed);
            t.map.clear();
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
            let map = &mut s.table.write().map;
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
            .map(|s| {
                s.table
                    .read()
                    .map
                    .values()
                    .filter(|b| b.until > now)
                    .count()
            })
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
    /// `max_keys` bounds each rung's counters and, in a table of their own, the blocks. A full
    /// counter store lets a new key displace only a count weighing no more than one refusal,
    /// else leaves the new key uncounted (see [`KeyedStore::acquire_or_skip`] and the module
    /// docs); no eviction of counts ever lifts a block.
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

    /// Refusals not counted so far, summed over the rungs, because the key was new and its
    /// counter shard was full of heavier counts (see [`KeyedStore::acquire_or_skip`]).
    pub fn untracked(&self) -> u64 {
        self.rungs
            .iter()
            .filter_map(|(_, c)| c.as_ref())
            .map(|c| c.stats().untracked)
            .sum()
    }

    /// Counts one refusal of `key` at `now`; the highest rung it trips blocks the key (unless
    /// a block at least as high is in force, or the key's shard of the block table is full of
    /// blocks in force: see [`BlockTable::impose`]). Returns the block imposed, if any.
    pub fn refused(&self, key: u64, now: Nanos) -> Option<Tripped> {
        let mut top = None;
        for (i, (rung, counter)) in self.rungs.iter().enumerate() {
            let tripped = match counter {
                None => true,
                // Not counted (a full store of heavier counts): no trip.
                Some(c) => c
                    .acquire_or_skip(key, now, 1)
                    .is_some_and(|d| !d.is_allowed()),
            };
            if tripped {
                top = Some((i, rung));
            }
        }
        let (i, rung) = top?;
        let rung_no = u8::try_from(i).unwrap_or(u8::MAX);
        // Already blocked at least this high (the common case while a client hammers): a read.
        if self.blocks.get(key, now).is_some_and(|b| b.rung >= rung_no) {
            return None;
        }
        let block = Block {
            until: now.saturating_add(ns(rung.block_for)),
            rung: rung_no,
        };
        self.blocks.impose(key, block, now).then_some(Tripped {
            rung: block.rung,
            block_for: rung.block_for,
            until: block.until,
        })
    }
}

#[cfg(test)]
mod tests;

/// The heaviest hitter of a limit: the most refusals any one key got within the current
/// minute (or the last one, whichever is larger), for an alert on "one key with a huge
/// rejection rate" without a metric label per key. Counts live in a bounded keyed store of
/// one-minute windows; the maximum is two atomics.
pub struct HotKeys {
    /// `None` only if the one-minute rate could not be made (it always can).
    counts: Option<KeyedStore<crate::windows::FixedWindow>>,
    /// (minute << 32) | most refusals of one key in that minute.
    current: std::sync::atomic::AtomicU64,
    previous: std::sync::atomic::AtomicU64,
}

const MINUTE: Nanos = 60 * 1_000_000_000;
const COUNT_CAP: u64 = u32::MAX as u64;

impl HotKeys {
    pub fn new(max_keys: usize) -> Self {
        let counts = Rate::new(COUNT_CAP, Duration::from_nanos(MINUTE))
            .ok()
            .map(|rate| {
                KeyedStore::new(crate::windows::FixedWindow::new(rate, COUNT_CAP), max_keys)
            });
        Self {
            counts,
            current: std::sync::atomic::AtomicU64::new(0),
            previous: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Counts one refusal of `key` at `now`.
    pub fn refused(&self, key: u64, now: Nanos) {
        let Some(counts) = &self.counts else {
            return;
        };
        let n = match counts.acquire(key, now, 1) {
            crate::decision::Decision::Allow { remaining, .. } => COUNT_CAP - remaining,
            crate::decision::Decision::Deny { .. } => COUNT_CAP,
        };
        let minute = now / MINUTE;
        let packed = (minute << 32) | n.min(COUNT_CAP);
        let mut cur = self.current.load(Ordering::Relaxed);
        loop {
            let (m, c) = (cur >> 32, cur & COUNT_CAP);
            if m == minute && c >= n {
                return;
            }
            if m > minute {
                return;
            }
            if m < minute {
                // A new minute: the old maximum becomes the previous one.
                self.previous.store(cur, Ordering::Relaxed);
            }
            match self.current.compare_exchange_weak(
                cur,
                packed,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// The most refusals one key got in the current or the previous minute, as of `now`.
    pub fn max(&self, now: Nanos) -> u64 {
        let minute = now / MINUTE;
        [&self.current, &self.previous]
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .filter(|v| (v >> 32) + 1 >= minute)
            .map(|v| v & COUNT_CAP)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod hot_tests {
    use super::*;

    #[test]
    fn the_heaviest_key_of_the_last_minute_is_reported() {
        let h = HotKeys::new(100);
        let t0 = 10 * MINUTE;
        for _ in 0..50 {
            h.refused(1, t0);
        }
        for _ in 0..7 {
            h.refused(2, t0 + 1);
        }
        assert_eq!(h.max(t0 + 2), 50);
        // Next minute: the last one still shows until a heavier one comes.
        h.refused(2, t0 + MINUTE);
        assert_eq!(h.max(t0 + MINUTE), 50);
        for _ in 0..99 {
            h.refused(3, t0 + MINUTE + 5);
        }
        assert_eq!(h.max(t0 + MINUTE + 6), 99);
        // Two quiet minutes later: nothing.
        assert_eq!(h.max(t0 + 4 * MINUTE), 0);
    }
}
